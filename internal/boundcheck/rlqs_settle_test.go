package boundcheck

import (
	"testing"
	"time"
)

// TestDeliveredWaitsForASendUnderWay: a response counts as in flight from
// the moment its send starts, and on a stream the sidecar has ended until
// its Envoy reads the end; the clock may move only once none is.
func TestDeliveredWaitsForASendUnderWay(t *testing.T) {
	e := &rlqsEnvoy{index: 0}
	at := Start.Add(30*time.Second + 501*time.Millisecond)
	for _, c := range []struct {
		name string
		s    rlqsStream
		want bool
	}{
		{"nothing in flight", rlqsStream{envoy: e, serverStarted: true}, true},
		{"a send under way, counts equal", rlqsStream{envoy: e, serverStarted: true, down: []time.Time{at}}, false},
		{"ended by the sidecar, a response unread", rlqsStream{envoy: e, serverStarted: true, serverEnded: true, serverSent: 1, down: []time.Time{at}}, false},
		{"ended by the sidecar, all read", rlqsStream{envoy: e, serverStarted: true, serverEnded: true, serverSent: 1, clientRecv: 1}, true},
		{"ended by the Envoy, a response lost", rlqsStream{envoy: e, serverStarted: true, clientEnded: true, serverSent: 1, down: []time.Time{at}}, true},
	} {
		s := c.s
		r := &rlqsRun{envoys: []*rlqsEnvoy{e}, streams: map[uint64]*rlqsStream{1: &s}}
		e.applied = s.clientRecv
		if got := r.delivered(); got != c.want {
			t.Errorf("%s: delivered() = %v, want %v", c.name, got, c.want)
		}
	}
}
