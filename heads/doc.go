// Package heads defines Tenure's signed chain heads (PROTOCOL.md §20.3): a
// live coordinator's signed statement "decision Seq of decision stream
// Stream has chain value Chain", published periodically on a core NATS
// subject (streams.Topology.HeadSubject) so that an auditor can keep heads
// outside NATS and later prove, with `tenure audit --heads`, that the
// stored log was rewritten or lost decisions, even when the rewritten log
// replays cleanly and no worker kept a receipt.
//
// A head travels as one line of JSON:
//
//	{"v":1,"stream":"TENURE_OUT","seq":42,"chain":"<64 hex>","input_seq":17,
//	 "at":"2026-05-01T12:00:00.123456789Z","coordinator":"c1",
//	 "key":"N...","sig":"<base64url, no padding>"}
//
// The signature is not over the JSON but over a fixed binary layout
// (SignedBytes), so that re-encoding a head never breaks it. Keys are nkeys
// (github.com/nats-io/nkeys, ed25519) of the server type: public keys start
// with "N", seeds with "SN". A coordinator keeps its seed in a file of mode
// 0600 (LoadOrCreateKey); an auditor trusts the public keys it was given
// out of band.
//
// The package does no I/O besides the key file and links no NATS client:
// workers and auditors can use it to check heads they keep.
package heads
