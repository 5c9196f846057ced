package streams

import (
	"context"
	"encoding/json"
	"fmt"
	"strconv"
	"strings"

	"github.com/nats-io/nats.go/jetstream"
)

// APIPrefix is the JetStream API prefix js sends its requests to
// ("$JS.API." unless js was made with another prefix or a domain).
func APIPrefix(js jetstream.JetStream) string {
	o := js.Options()
	switch {
	case o.APIPrefix != "":
		if !strings.HasSuffix(o.APIPrefix, ".") {
			return o.APIPrefix + "."
		}
		return o.APIPrefix
	case o.Domain != "":
		return "$JS." + o.Domain + ".API."
	}
	return jetstream.DefaultAPIPrefix
}

// StoredHeader returns the header block of message seq of stream exactly
// as stored (nil: the message has none), from the stream's message get
// ($JS.API.STREAM.MSG.GET), whose answer carries the block's bytes as they
// are. A NATS client's delivery of the message hands over only what the
// client parsed of them: a block that is not in its own form loses lines
// (a status line, a line without a colon, one with an empty name), spacing
// and the order of names, or all of itself when it cannot be parsed.
func StoredHeader(ctx context.Context, js jetstream.JetStream, stream string, seq uint64) ([]byte, error) {
	resp, err := js.Conn().RequestWithContext(ctx, APIPrefix(js)+"STREAM.MSG.GET."+stream, []byte(`{"seq":`+strconv.FormatUint(seq, 10)+`}`))
	if err != nil {
		return nil, fmt.Errorf("streams: get %s %d: %w", stream, seq, Classify(err))
	}
	var r struct {
		Message *struct {
			Seq  uint64 `json:"seq"`
			Hdrs []byte `json:"hdrs"`
		} `json:"message"`
		Error *struct {
			Code        int    `json:"code"`
			ErrCode     int    `json:"err_code"`
			Description string `json:"description"`
		} `json:"error"`
	}
	if err := json.Unmarshal(resp.Data, &r); err != nil {
		return nil, fmt.Errorf("streams: get %s %d: %w", stream, seq, err)
	}
	switch {
	case r.Error != nil:
		return nil, fmt.Errorf("streams: get %s %d: %w", stream, seq, &jetstream.APIError{Code: r.Error.Code,
			ErrorCode: jetstream.ErrorCode(r.Error.ErrCode), Description: r.Error.Description})
	case r.Message == nil || r.Message.Seq != seq:
		return nil, fmt.Errorf("streams: get %s %d: an answer without that message", stream, seq)
	}
	return r.Message.Hdrs, nil
}
