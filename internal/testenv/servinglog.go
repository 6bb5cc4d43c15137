package testenv

import (
	"bytes"
	"encoding/json"
	"strings"
	"sync"
)

// ServingAddrs are the bound addresses of `throttlekit serve`'s "serving"
// log line.
type ServingAddrs struct {
	GRPC string `json:"grpc"`
	HTTP string `json:"http"`
}

// ServingLog is the output of a `throttlekit serve` run with
// --log-format json: it keeps everything the process writes and sends the
// addresses of its first "serving" line on Serving. It is safe for
// concurrent use; set it as the command's Stdout and Stderr.
type ServingLog struct {
	// Serving receives the first serving line's addresses, once.
	Serving chan ServingAddrs

	mu      sync.Mutex
	buf     bytes.Buffer
	scanned int  // bytes of buf already split into lines
	sent    bool // Serving has been sent
}

// NewServingLog returns an empty ServingLog.
func NewServingLog() *ServingLog { return &ServingLog{Serving: make(chan ServingAddrs, 1)} }

// Write appends p and looks at the lines it completes for the first
// serving line.
func (l *ServingLog) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.buf.Write(p)
	for {
		rest := l.buf.Bytes()[l.scanned:]
		i := bytes.IndexByte(rest, '\n')
		if i < 0 {
			return len(p), nil
		}
		l.scanned += i + 1
		if l.sent {
			continue
		}
		var line struct {
			Msg string `json:"msg"`
			ServingAddrs
		}
		if json.Unmarshal(rest[:i], &line) == nil && line.Msg == "serving" {
			l.Serving <- line.ServingAddrs
			l.sent = true
		}
	}
}

// String returns everything written so far.
func (l *ServingLog) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.buf.String()
}

// Records returns the JSON log records whose msg is msg.
func (l *ServingLog) Records(msg string) []map[string]any {
	var out []map[string]any
	for _, line := range strings.Split(l.String(), "\n") {
		var rec map[string]any
		if json.Unmarshal([]byte(line), &rec) == nil && rec["msg"] == msg {
			out = append(out, rec)
		}
	}
	return out
}
