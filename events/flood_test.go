package events

// A body padded to the protocol's limit decodes at memory speed: the
// decoder skips runs of spaces and digits many bytes at a time.

import (
	"bytes"
	"testing"
)

func BenchmarkDecodeFloodBody(b *testing.B) {
	body := []byte(`{"v":1,"lease_id":"L1","generation":1,"progress_seq":1,"value":1}`)
	body = append(body, bytes.Repeat([]byte(" "), MaxInputBytes-len(body))...)
	var in Input
	b.SetBytes(int64(len(body)))
	for b.Loop() {
		_ = DecodeInput("tenure.in.worker.w2.j.progress", body, &in)
	}
}

func TestDigits8(t *testing.T) {
	for c := 0; c < 256; c++ {
		for pos := range 8 {
			b := []byte("12345678")
			b[pos] = byte(c)
			want := c >= '0' && c <= '9'
			if got := digits8(uint64(b[0]) | uint64(b[1])<<8 | uint64(b[2])<<16 | uint64(b[3])<<24 | uint64(b[4])<<32 | uint64(b[5])<<40 | uint64(b[6])<<48 | uint64(b[7])<<56); got != want {
				t.Fatalf("digits8(%q) = %v", b, got)
			}
		}
	}
}

func BenchmarkDecodeFloodDigits(b *testing.B) {
	body := []byte(`{"v":1,"lease_id":"L1","generation":`)
	body = append(body, bytes.Repeat([]byte("7"), MaxInputBytes-len(body)-1)...)
	body = append(body, '}')
	var in Input
	b.SetBytes(int64(len(body)))
	for b.Loop() {
		_ = DecodeInput("tenure.in.worker.w2.j.ack", body, &in)
	}
}
