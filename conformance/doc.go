// Package conformance is the conformance kit of Tenure's worker SDKs: it
// plays language-neutral scenarios (scenarios/*.json) against a worker
// SDK driven through an adapter process (ADAPTER.md, adapter protocol 1),
// on a real embedded nats-server and a real coordinator, and checks what
// the SDK says (replies, typed errors, lost leases and their causes,
// handler calls) and what the streams hold (verdicts, projections,
// inputs).
//
//	func TestConformance(t *testing.T) {
//		conformance.Run(t, conformance.Adapter{Command: "node sdk/ts/dist/conformance-adapter.js", Dir: ".."})
//	}
//
// go test ./conformance/ runs every scenario against the Go SDK's adapter
// (conformance/goadapter) and, when TENURE_CONFORMANCE_ADAPTER (or
// -adapter) names another adapter's command line, against that one too
// (README.md).
package conformance
