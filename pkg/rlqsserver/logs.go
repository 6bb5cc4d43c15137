package rlqsserver

import (
	"log/slog"
	"sync"
	"time"
)

// Bounds of the server's warnings.
const (
	// WarnEvery is how often one cause of warning (a message, domain and
	// rule) is logged at most; the line after a quiet spell says how many
	// of that cause were not logged since the one before.
	WarnEvery = 10 * time.Second
	// maxWarnCauses bounds the causes remembered; past it, a new cause is
	// logged under the catch-all cause "other".
	maxWarnCauses = 1024
)

// warnings rate-limits the server's warnings per cause, on the server's
// clock. A store outage fails every bucket's lease and return: logged as
// each happened, one client's 10,000 buckets wrote 219,475 "lease failed"
// lines and 5,923 "returning units failed" (39 MB) in 50 s (issue 41). It
// is safe for concurrent use.
type warnings struct {
	mu     sync.Mutex
	causes map[warnCause]*warnState
}

type warnCause struct{ msg, domain, rule string }

type warnState struct {
	last       time.Time // when the cause was last logged
	suppressed int64     // not logged since then
}

// warn logs msg with args for the cause (msg, domain, rule) unless the
// cause was logged less than WarnEvery before now; then it only counts it.
func (w *warnings) warn(log *slog.Logger, now time.Time, msg, domain, rule string, args ...any) {
	c := warnCause{msg, domain, rule}
	w.mu.Lock()
	if w.causes == nil {
		w.causes = map[warnCause]*warnState{}
	}
	s := w.causes[c]
	if s == nil {
		if len(w.causes) >= maxWarnCauses {
			c = warnCause{msg: "other"}
			if s = w.causes[c]; s == nil {
				s = &warnState{}
				w.causes[c] = s
			}
		} else {
			s = &warnState{}
			w.causes[c] = s
		}
	}
	if !s.last.IsZero() && now.Sub(s.last) < WarnEvery {
		s.suppressed++
		w.mu.Unlock()
		return
	}
	n := s.suppressed
	s.last, s.suppressed = now, 0
	w.mu.Unlock()
	all := append([]any{"domain", domain}, args...)
	if rule != "" {
		all = append(all, "rule", rule)
	}
	if n > 0 {
		all = append(all, "not_logged_since_last", n)
	}
	log.Warn(msg, all...)
}
