package audit

import (
	"crypto/sha256"
	"fmt"
	"strconv"
	"strings"

	"github.com/maknow/tenure/events"
)

// A Witness is something a participant was told and kept (PROTOCOL.md
// §20): a receipt of an input whose append the stream acknowledged, a
// receipt of a decision it received, a signed chain head. The audit checks
// each against the log it replays; one the log does not bear out (the
// input or decision is missing, or differs) is a finding, even when the
// log itself replays cleanly: the log lost or rewrote what the witness saw.
type Witness struct {
	// Origin says where the witness comes from, for the finding: a file
	// and line, and who kept it ("w1.receipts:12 (worker w1)").
	Origin string
	Kind   WitnessKind
	// Seq is the input's sequence in the input stream (WitnessInput) or
	// the decision's in the decision stream (WitnessDecision); with
	// Intake, the input's sequence in that intake stream.
	Seq uint64
	// Intake is the worker's intake stream that stored the input
	// (quotas, PROTOCOL.md §4.2: its PubAck named it), "" for the input
	// stream: the audit finds the input by its Nats-Stream-Source header.
	Intake string
	// Subject and BodyHash (SHA-256 of the body) are the input as
	// published (WitnessInput).
	Subject  string
	BodyHash [sha256.Size]byte
	// Chain is the decision's chain value (WitnessDecision): it commits to
	// the decision and every one before it. Cause, if not zero, is the
	// input it answered (checked too).
	Chain events.Chain
	Cause uint64
}

// WitnessKind is what a witness is about.
type WitnessKind string

// Kinds of witnesses.
const (
	WitnessInput    WitnessKind = "input"
	WitnessDecision WitnessKind = "decision"
)

// WitnessFinding is a witness the log does not bear out.
type WitnessFinding struct {
	Origin  string      `json:"origin"`
	Kind    WitnessKind `json:"kind"`
	Seq     uint64      `json:"seq"`
	Problem string      `json:"problem"`
}

// Witnesses is what the audit found about the witnesses it was given
// (Options.Witnesses).
type Witnesses struct {
	Given     int                  `json:"given"`
	Confirmed int                  `json:"confirmed"` // borne out by the log
	Findings  List[WitnessFinding] `json:"findings"`
}

// witnesses indexes the witnesses by stream sequence.
type witnesses struct {
	all     []Witness
	inputs  map[uint64][]int
	intake  map[string][]int // by "<intake stream> <seq>"
	decs    map[uint64][]int
	checked []bool
}

func newWitnesses(ws []Witness) *witnesses {
	if len(ws) == 0 {
		return nil
	}
	w := &witnesses{all: ws, inputs: map[uint64][]int{}, intake: map[string][]int{}, decs: map[uint64][]int{}, checked: make([]bool, len(ws))}
	for i, x := range ws {
		switch x.Kind {
		case WitnessInput:
			if x.Intake != "" {
				k := x.Intake + " " + strconv.FormatUint(x.Seq, 10)
				w.intake[k] = append(w.intake[k], i)
				continue
			}
			w.inputs[x.Seq] = append(w.inputs[x.Seq], i)
		case WitnessDecision:
			w.decs[x.Seq] = append(w.decs[x.Seq], i)
		}
	}
	return w
}

func (c *checker) witnessFinding(x *Witness, format string, args ...any) {
	c.rep.Witnesses.Findings.add(c.max, WitnessFinding{Origin: x.Origin, Kind: x.Kind, Seq: x.Seq, Problem: fmt.Sprintf(format, args...)})
}

// witnessInput checks the witnesses of the input just read.
func (c *checker) witnessInput(raw *events.Raw) {
	w := c.wit
	if w == nil {
		return
	}
	idx := w.inputs[raw.Seq]
	if raw.Source != "" && len(w.intake) > 0 {
		// "<stream> <seq> <filter> <transform> <subject>": the intake
		// stream and the sequence its PubAck named.
		f := strings.Fields(raw.Source)
		if len(f) >= 2 {
			idx = append(idx, w.intake[f[0]+" "+f[1]]...)
		}
	}
	if len(idx) == 0 {
		return
	}
	sum := sha256.Sum256(raw.Body)
	for _, i := range idx {
		x := &w.all[i]
		w.checked[i] = true
		switch {
		case x.Subject != raw.Subject:
			c.witnessFinding(x, "input %d is %s in the log; the receipt says %s", raw.Seq, raw.Subject, x.Subject)
		case x.BodyHash != sum:
			c.witnessFinding(x, "input %d (%s) has another body in the log (SHA-256 %x; the receipt says %x)", raw.Seq, raw.Subject, sum, x.BodyHash)
		default:
			c.rep.Witnesses.Confirmed++
		}
	}
}

// witnessDecision checks the witnesses of decision s, whose chain value,
// computed from the log, is chain.
func (c *checker) witnessDecision(s *StoredDecision, cause uint64, chain events.Chain) {
	w := c.wit
	if w == nil {
		return
	}
	for _, i := range w.decs[s.Seq] {
		x := &w.all[i]
		w.checked[i] = true
		switch {
		case x.Chain != chain:
			c.witnessFinding(x, "decision %d has chain value %s in the log; the witness says %s: the log at or before decision %d is not the one it was shown", s.Seq, chain, x.Chain, s.Seq)
		case x.Cause != 0 && x.Cause != cause:
			c.witnessFinding(x, "decision %d answers input %d in the log; the witness says input %d", s.Seq, cause, x.Cause)
		default:
			c.rep.Witnesses.Confirmed++
		}
	}
}

// witnessesLeft reports the witnesses of messages the audit never read.
func (c *checker) witnessesLeft() {
	w := c.wit
	if w == nil {
		return
	}
	for i := range w.all {
		if w.checked[i] {
			continue
		}
		x := &w.all[i]
		if x.Intake != "" {
			c.witnessFinding(x, "input %d of intake stream %s is not in the input stream", x.Seq, x.Intake)
			continue
		}
		switch x.Kind {
		case WitnessInput, WitnessDecision:
			if x.Kind == WitnessInput && x.Seq <= c.start || x.Kind == WitnessDecision && x.Seq <= c.startDec {
				c.witnessFinding(x, "%s %d is before the audit's start: not checked (audit from the first input)", x.Kind, x.Seq)
				continue
			}
		}
		switch x.Kind {
		case WitnessInput:
			if x.Seq > c.inEnd {
				c.witnessFinding(x, "input %d is not in the log: the input stream ends at %d", x.Seq, c.inEnd)
			} else {
				c.witnessFinding(x, "input %d is not in the input stream", x.Seq)
			}
		case WitnessDecision:
			if x.Seq > c.prevDec {
				c.witnessFinding(x, "decision %d is not in the log: the decision stream ends at %d", x.Seq, c.prevDec)
			} else {
				c.witnessFinding(x, "decision %d is not in the decision stream", x.Seq)
			}
		default:
			c.witnessFinding(x, "a witness of kind %q", x.Kind)
		}
	}
}
