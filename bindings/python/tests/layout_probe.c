/*
 * layout_probe.c -- print the size, alignment and field offsets of every
 * public struct of bindlog.h, for the Python binding's layout test
 * (bindings/python/tests/test_layout.py compares them with ctypes).
 *
 * Output, one item a line:
 *   struct <name> <sizeof> <alignof>
 *   field <name>.<field> <offsetof> <sizeof field>
 */
#include <stdalign.h>
#include <stddef.h>
#include <stdio.h>

#include "bindlog.h"

#define S(T) printf("struct %s %zu %zu\n", #T, sizeof(T), alignof(T))
#define F(T, f) printf("field %s.%s %zu %zu\n", #T, #f, offsetof(T, f), sizeof(((T *)0)->f))

int main(void)
{
    S(bindlog_options);
    F(bindlog_options, version);
    F(bindlog_options, durability);
    F(bindlog_options, read_only);
    F(bindlog_options, map_size);
    F(bindlog_options, max_readers);
    F(bindlog_options, clock_ms);
    F(bindlog_options, clock_ctx);
    F(bindlog_options, etcd_cacert);
    F(bindlog_options, etcd_cert);
    F(bindlog_options, etcd_key);
    F(bindlog_options, etcd_user);
    F(bindlog_options, etcd_password);
    F(bindlog_options, etcd_max_txn_ops);
    F(bindlog_options, log_size);
    F(bindlog_options, lock_timeout_ms);

    S(bindlog_result);
    F(bindlog_result, outcome);
    F(bindlog_result, lsn);
    F(bindlog_result, generation);
    F(bindlog_result, session_id);

    S(bindlog_binding);
    F(bindlog_binding, session_id);
    F(bindlog_binding, generation);
    F(bindlog_binding, lsn);
    F(bindlog_binding, updated_ms);
    F(bindlog_binding, key);
    F(bindlog_binding, last_activity_ms);

    S(bindlog_policy);
    F(bindlog_policy, mode);
    F(bindlog_policy, idle_ms);
    F(bindlog_policy, daily_boundary_ms);

    S(bindlog_route_result);
    F(bindlog_route_result, outcome);
    F(bindlog_route_result, reason);
    F(bindlog_route_result, lsn);
    F(bindlog_route_result, generation);
    F(bindlog_route_result, last_activity_ms);
    F(bindlog_route_result, session_id);
    F(bindlog_route_result, previous_id);

    S(bindlog_session);
    F(bindlog_session, session_id);
    F(bindlog_session, key);
    F(bindlog_session, parent_id);
    F(bindlog_session, created_lsn);
    F(bindlog_session, ended_lsn);
    F(bindlog_session, created_ms);
    F(bindlog_session, ended_ms);
    F(bindlog_session, end_reason);
    F(bindlog_session, origin_len);

    S(bindlog_import_entry);
    F(bindlog_import_entry, key);
    F(bindlog_import_entry, session_id);
    F(bindlog_import_entry, time_ms);
    F(bindlog_import_entry, origin);
    F(bindlog_import_entry, origin_len);

    S(bindlog_lsn_range);
    F(bindlog_lsn_range, first);
    F(bindlog_lsn_range, last);

    S(bindlog_recover_report);
    F(bindlog_recover_report, pages);
    F(bindlog_recover_report, damaged_pages);
    F(bindlog_recover_report, records_found);
    F(bindlog_recover_report, head_lsn);
    F(bindlog_recover_report, head_known);
    F(bindlog_recover_report, base_lsn);
    F(bindlog_recover_report, base_image);
    F(bindlog_recover_report, records_lost);
    F(bindlog_recover_report, records_by_effect);
    F(bindlog_recover_report, records_skipped);
    F(bindlog_recover_report, cut_lsn);
    F(bindlog_recover_report, records_rederived);
    F(bindlog_recover_report, nranges);
    F(bindlog_recover_report, ranges);
    F(bindlog_recover_report, nkeys);
    F(bindlog_recover_report, keys);
    F(bindlog_recover_report, unknown_lost);
    F(bindlog_recover_report, new_head_lsn);
    F(bindlog_recover_report, digest);
    F(bindlog_recover_report, log_state);
    F(bindlog_recover_report, log_records);
    F(bindlog_recover_report, log_first_lsn);
    F(bindlog_recover_report, log_last_lsn);
    F(bindlog_recover_report, log_why);

    S(bindlog_upgrade_report);
    F(bindlog_upgrade_report, from_format);
    F(bindlog_upgrade_report, upgraded);
    F(bindlog_upgrade_report, head_lsn);
    F(bindlog_upgrade_report, base_lsn);
    F(bindlog_upgrade_report, records);
    F(bindlog_upgrade_report, bindings);
    F(bindlog_upgrade_report, sessions);
    F(bindlog_upgrade_report, digest);
    F(bindlog_upgrade_report, staging_left);

    S(bindlog_event);
    F(bindlog_event, type);
    F(bindlog_event, key);
    F(bindlog_event, session_id);
    F(bindlog_event, expect);
    F(bindlog_event, generation);
    F(bindlog_event, reason);
    F(bindlog_event, origin);
    F(bindlog_event, origin_len);

    S(bindlog_record);
    F(bindlog_record, lsn);
    F(bindlog_record, type);
    F(bindlog_record, time_ms);
    F(bindlog_record, generation);
    F(bindlog_record, key);
    F(bindlog_record, key_len);
    F(bindlog_record, session_id);
    F(bindlog_record, other_id);
    F(bindlog_record, reason);
    F(bindlog_record, origin);
    F(bindlog_record, origin_len);
    F(bindlog_record, origin_present);

    S(bindlog_stats);
    F(bindlog_stats, head_lsn);
    F(bindlog_stats, base_lsn);
    F(bindlog_stats, log_records);
    F(bindlog_stats, bindings);
    F(bindlog_stats, live_bindings);
    F(bindlog_stats, sessions);
    F(bindlog_stats, live_sessions);
    F(bindlog_stats, applied);
    F(bindlog_stats, events);
    F(bindlog_stats, commits);
    F(bindlog_stats, grouped_events);
    F(bindlog_stats, map_size);
    F(bindlog_stats, map_used);
    F(bindlog_stats, file_size);
    F(bindlog_stats, readers_used);
    F(bindlog_stats, readers_max);
    F(bindlog_stats, durability);
    F(bindlog_stats, format_version);
    F(bindlog_stats, checkpoint_lsn);
    F(bindlog_stats, log_size);
    F(bindlog_stats, log_used);

    S(bindlog_check_report);
    F(bindlog_check_report, problems);
    F(bindlog_check_report, records);
    F(bindlog_check_report, head_lsn);
    F(bindlog_check_report, first_bad_lsn);
    F(bindlog_check_report, first_bad_key);
    F(bindlog_check_report, message);
    F(bindlog_check_report, state_digest);
    F(bindlog_check_report, replay_digest);
    return 0;
}
