package redisstore

import (
	"errors"
	"testing"
)

// TestLedgerReplyRefusesMalformed: a ledger reply is read as name,
// demand, past triples; anything else is ErrMalformedReply, never a panic.
func TestLedgerReplyRefusesMalformed(t *testing.T) {
	good, err := demands([]any{"a", int64(3), int64(0), "b", int64(5), int64(1)})
	if err != nil || len(good) != 2 || good[1].Member != "b" || good[1].Units != 5 || !good[1].Past || good[0].Past {
		t.Fatalf("a good reply: %+v, %v", good, err)
	}
	for _, bad := range [][]any{
		{"a", int64(3)},
		{"a", "3", int64(0)},
		{int64(1), int64(3), int64(0)},
		{"a", int64(3), "0"},
		{nil, nil, nil},
	} {
		if _, err := demands(bad); !errors.Is(err, ErrMalformedReply) {
			t.Errorf("%v: %v, want ErrMalformedReply", bad, err)
		}
	}
}
