package federation_test

import (
	"bufio"
	"fmt"
	"net"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/throttlekit/throttlekit/internal/testenv"
)

// leaseWatch counts the leases of one key a Redis L3 runs, read from its
// MONITOR stream on a connection of its own around the proxy: whether a
// lease went out and reached the L3, which the count of what the L3
// granted cannot tell apart from a lease it received and did not count.
// A lease is the store's one-key script (EVALSHA, or EVAL after NOSCRIPT)
// naming the key; a give-back (ReturnOnce) names two.
type leaseWatch struct {
	addr   string
	marker string // ECHOed by stop: the end of the stream
	conn   net.Conn
	done   chan struct{}

	mu     sync.Mutex
	leases int
	err    error
}

// lease matches a MONITOR line of a one-key script from a client —
//
//	+1700000000.000001 [0 127.0.0.1:5555] "evalsha" "SHA" "1" "KEY" ...
//
// — not of a command a script runs ([0 lua]), nor a two-key one.
var lease = regexp.MustCompile(`^\+[0-9.]+ \[[0-9]+ [0-9.]+:[0-9]+\] "(?:evalsha|eval)" "(?:[^"\\]|\\.)*" "1" `)

// watchLeases starts watching the server at addr for leases of key; it
// returns once the server has begun monitoring.
func watchLeases(t *testing.T, addr, key string) *leaseWatch {
	t.Helper()
	conn, err := net.DialTimeout("tcp", addr, testenv.StoreDeadline)
	if err != nil {
		t.Fatalf("dialling the L3 to watch it: %v", err)
	}
	_ = conn.SetDeadline(time.Now().Add(testenv.StoreDeadline))
	rd := bufio.NewReader(conn)
	if _, err := conn.Write([]byte("MONITOR\r\n")); err != nil {
		t.Fatalf("MONITOR: %v", err)
	}
	if line, err := rd.ReadString('\n'); err != nil || !strings.HasPrefix(line, "+OK") {
		t.Fatalf("MONITOR: %q %v", line, err)
	}
	_ = conn.SetDeadline(time.Time{})
	w := &leaseWatch{addr: addr, marker: fmt.Sprintf("leasewatch-%d", time.Now().UnixNano()), conn: conn, done: make(chan struct{})}
	go func() {
		defer close(w.done)
		for {
			line, err := rd.ReadString('\n')
			if err != nil || strings.Contains(line, w.marker) {
				return
			}
			if lease.MatchString(line) && strings.Contains(line, key) {
				w.mu.Lock()
				w.leases++
				w.mu.Unlock()
			}
		}
	}()
	t.Cleanup(func() { _ = w.conn.Close() })
	return w
}

// stop ends the watch once the stream has shown every command the server
// ran before stop was called — it ECHOes a marker and reads up to it — and
// returns the leases seen.
func (w *leaseWatch) stop(t *testing.T) int {
	t.Helper()
	defer w.conn.Close()
	c, err := net.DialTimeout("tcp", w.addr, testenv.StoreDeadline)
	if err != nil {
		t.Fatalf("dialling the L3 to end the watch: %v", err)
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(testenv.StoreDeadline))
	if _, err := fmt.Fprintf(c, "ECHO %s\r\n", w.marker); err != nil {
		t.Fatalf("ending the watch: %v", err)
	}
	select {
	case <-w.done:
	case <-time.After(testenv.StoreDeadline):
		t.Fatalf("the L3's MONITOR stream never showed the ECHO that ends the watch")
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.leases
}
