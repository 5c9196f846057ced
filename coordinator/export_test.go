package coordinator

import (
	"context"
	"time"

	"github.com/nats-io/nats.go/jetstream"
)

// SetSnapshotHook makes cfg run f in the live loop after each snapshot it
// takes (freezes), in the loop's turn (tests use it to make a turn slow).
func SetSnapshotHook(cfg *Config, f func()) { cfg.snapshotTaken = f }

// SetEncodeHook makes cfg run f in the snapshot encoder before it encodes
// each snapshot the live loop took, with the encoder's context (tests use
// it to hold an encoding while the loop goes on).
func SetEncodeHook(cfg *Config, f func(context.Context)) { cfg.encodingSnapshot = f }

// RenewOnce is renewOnce (leadership.go): one renewal of the leadership
// entry that id holds at revision held.
func RenewOnce(ctx context.Context, kv jetstream.KeyValue, id string, held uint64) (uint64, error) {
	return renewOnce(ctx, jsLeader{kv}, id, held, 2*time.Second)
}

// LeaderKey is the leadership entry's key in the leader bucket.
const LeaderKey = leaderKey
