// @tenure/worker: Tenure's worker SDK for TypeScript and JavaScript, a port
// of the Go SDK (package worker). See README.md.

export { connect, Worker } from "./worker.js";
export type { WorkerOptions, CallOptions } from "./worker.js";
export {
  DEFAULT_OFFER_BUFFER, DEFAULT_PUBLISH_TIMEOUT_MS, DEFAULT_STREAM_PREFIX, DEFAULT_VERDICT_TIMEOUT_MS, MIN_PUBLISH_TIMEOUT_MS,
} from "./worker.js";
export { Lease, DEFAULT_RENEW_FRACTION } from "./lease.js";
export type { LeaseOptions } from "./lease.js";
export { Offer } from "./offer.js";
export { leaseRef, validTraceParent, SPAN_RUN, ATTR as TRACE_ATTRIBUTES, TRACEPARENT, type TracingOptions } from "./tracing.js";
export type { EffectsBinder, Handler, Job, Result, RunOptions } from "./run.js";
export { describeResult } from "./run.js";
export { drainOnSignals } from "./signals.js";
export type { SignalShutdown, SignalShutdownOptions } from "./signals.js";
export { ErrorCode, TenureError, VerdictError, isError, permanent, verdictCodes } from "./errors.js";
export { BoundFence, Fence, FenceClient, FenceHeader, fenceRefusal, formatFencingToken, parseFencingToken, setFenceHeaders } from "./fence.js";
export type { FenceClientOptions, FencedLease, FencingToken } from "./fence.js";
export { connectDispatcher, Dispatcher, isDuplicateSubmit, DEFAULT_DISPATCHER_TIMEOUT_MS, MAX_INPUT_BYTES, MAX_SUBMITS_IN_FLIGHT } from "./ops.js";
export type { DispatchCallOptions, DispatcherOptions, SubmitJob, SubmitOptions, SubmitResult } from "./ops.js";
export { realClock } from "./clock.js";
export type { Clock, Timer } from "./clock.js";
export {
  acceptedKind, derivedKind, validToken, timeMs, MAX_BATCH, MAX_SEQ, MAX_SLOTS, MAX_TEXT_BYTES, PROTOCOL_VERSION,
} from "./protocol.js";
export type { Decision, JobProjection, Kind, Outcome, State } from "./protocol.js";
/** The worker's store of unclaimed decisions (exported for its tests; Worker uses it, nothing else needs to). */
export { Stash, STASH_AGE_MS, STASH_MAX, wants } from "./stash.js";
