package snapshot

import (
	"bytes"
	"context"
	"crypto/sha256"
	"errors"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/maknow/tenure/events"
	"github.com/maknow/tenure/streams"
)

// JetStream returns the Objects of the snapshot bucket of top, opened as h
// (streams.Ensure or streams.Open).
func JetStream(top streams.Topology, h *streams.Handles) Objects {
	return NewObjects(top.SnapshotBucket(), h.Snapshots, h.SnapshotStream)
}

// NewObjects returns the Objects of JetStream object store obs, named
// bucket, whose stream (OBJ_<bucket>) stream reads. Descriptions are obs's;
// GetBytes reads the chunks of the version described (ADR-20: messages on
// $O.<bucket>.C.<nuid>) one by one by sequence, each read bounded by
// ChunkTimeout, and checks their size and digest against the description.
// Unlike ObjectStore.Get it never waits for chunks that are gone: a chunk
// missing, or not read in time, ends the read, with ErrReplaced if the
// version is no longer the one stored, else ErrUnreadable (a replica
// behind, a leader being elected); chunks that do not match the
// description end it with ErrCorrupt.
func NewObjects(bucket string, obs jetstream.ObjectStore, stream streams.MsgGetter) Objects {
	return &jsObjects{bucket: bucket, obs: obs, stream: stream}
}

// ChunkTimeout bounds the read of one chunk of a snapshot (128 KiB).
const ChunkTimeout = 5 * time.Second

// maxPrealloc bounds the buffer allocated for a snapshot before its chunks
// are read: a description is not trusted with the allocation of its size.
const maxPrealloc = 64 << 20

type jsObjects struct {
	bucket string
	obs    jetstream.ObjectStore
	stream streams.MsgGetter
}

func (o *jsObjects) GetInfo(ctx context.Context, name string, opts ...jetstream.GetObjectInfoOpt) (*jetstream.ObjectInfo, error) {
	return o.obs.GetInfo(ctx, name, opts...)
}

func (o *jsObjects) GetBytes(ctx context.Context, name string, _ ...jetstream.GetObjectOpt) ([]byte, error) {
	info, err := o.obs.GetInfo(ctx, name)
	if err != nil {
		return nil, err
	}
	if !events.ValidToken(info.NUID) || info.Opts != nil && info.Opts.Link != nil {
		// A NUID is one subject token: a wildcard would read the chunks
		// of every version at once.
		return nil, newErr(ErrCorrupt, nil, "its metadata names no stored object (NUID %q)", info.NUID)
	}
	want, err := jetstream.DecodeObjectDigest(info.Digest)
	if err != nil {
		return nil, newErr(ErrCorrupt, err, "its metadata has no valid digest: %v", err)
	}
	subject := "$O." + o.bucket + ".C." + info.NUID
	data := make([]byte, 0, min(info.Size, maxPrealloc))
	sum := sha256.New()
	next := uint64(1)
	for n := uint32(0); n < info.Chunks; n++ {
		cctx, cancel := context.WithTimeout(ctx, ChunkTimeout)
		m, err := o.stream.GetMsg(cctx, next, jetstream.WithGetMsgSubject(subject))
		cancel()
		if err != nil {
			return nil, o.missing(ctx, name, info, n, err)
		}
		if uint64(len(data))+uint64(len(m.Data)) > info.Size {
			return nil, newErr(ErrCorrupt, nil, "its chunks hold more than the %d bytes its metadata says", info.Size)
		}
		data = append(data, m.Data...)
		sum.Write(m.Data)
		next = m.Sequence + 1
	}
	if uint64(len(data)) != info.Size {
		return nil, newErr(ErrCorrupt, nil, "its %d chunks hold %d bytes, its metadata says %d", info.Chunks, len(data), info.Size)
	}
	if !bytes.Equal(sum.Sum(nil), want) {
		return nil, newErr(ErrCorrupt, nil, "its chunks do not match the digest in its metadata")
	}
	return data, nil
}

// missing is the error of a chunk that could not be read (err): ErrReplaced
// if the version described is no longer stored, else ErrUnreadable.
func (o *jsObjects) missing(ctx context.Context, name string, info *jetstream.ObjectInfo, n uint32, err error) error {
	if ctx.Err() != nil {
		return newErr(ErrUnreadable, ctx.Err(), "chunk %d of %d: %v", n+1, info.Chunks, ctx.Err())
	}
	ictx, cancel := context.WithTimeout(ctx, RequestTimeout)
	cur, ierr := o.obs.GetInfo(ictx, name)
	cancel()
	if errors.Is(ierr, jetstream.ErrObjectNotFound) || ierr == nil && cur.NUID != info.NUID {
		return newErr(ErrReplaced, nil, "its version %s was replaced after %d of its %d chunks were read", info.NUID, n, info.Chunks)
	}
	if errors.Is(err, jetstream.ErrMsgNotFound) {
		return newErr(ErrUnreadable, err, "chunk %d of %d is not in the object store's stream (its description stays)", n+1, info.Chunks)
	}
	return newErr(ErrUnreadable, streams.Classify(err), "chunk %d of %d: %v", n+1, info.Chunks, err)
}
