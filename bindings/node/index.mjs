// ESM entry of bindlog: the same objects as the CommonJS entry (index.js).
import bindlog from './index.js';

export const { Store, BindlogError, StoreClosedError, Snapshot, ANY_GENERATION, parseSessionsJson,
    dailyBoundaryMs, policyFromOpenClaw, policyFromHermes, version } = bindlog;
export default bindlog;
