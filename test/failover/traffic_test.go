package failover

import (
	"context"
	"errors"
	"fmt"
	"net"
	"strings"
	"sync"
	"time"

	"github.com/throttlekit/throttlekit/pkg/engine"
	"github.com/throttlekit/throttlekit/pkg/gale"
	"github.com/throttlekit/throttlekit/pkg/gale/redisstore"
)

// answer is one Decide call as a caller saw it.
type answer struct {
	start, end time.Time
	outcome    outcome
	cause      cause // of a store error
}

// cause is why the store failed an answer.
type cause uint8

const (
	timedOut     cause = iota // the store timeout ended the call
	unreplicated              // WAIT's replicas did not acknowledge in time
	refused                   // anything else: a dead or demoted server
)

func (c cause) String() string {
	return [...]string{"timed out", "unreplicated", "refused"}[c]
}

// causeOf classifies a store error.
func causeOf(err error) cause {
	var ne net.Error
	switch {
	case errors.Is(err, redisstore.ErrNotReplicated):
		return unreplicated
	case errors.Is(err, context.DeadlineExceeded), errors.As(err, &ne) && ne.Timeout():
		return timedOut
	}
	return refused
}

type outcome uint8

const (
	admitted    outcome = iota
	denied              // OVER_LIMIT
	storeFailed         // an error wrapping gale.ErrStore: on_store_error "error" decided
	otherError          // anything else: a bug
)

// ledger holds every answer, by rule, and every count a store acknowledged.
type ledger struct {
	mu        sync.Mutex
	answers   map[string][]answer
	acks      []ack
	otherErr  error            // the first otherError
	decisions int              // answers the store decided (admitted or denied)
	refusal   map[string]error // by rule, its last store error refused
}

func newLedger() *ledger {
	return &ledger{answers: map[string][]answer{}, refusal: map[string]error{}}
}

func (l *ledger) add(rule string, a answer, err error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.answers[rule] = append(l.answers[rule], a)
	if a.outcome == admitted || a.outcome == denied {
		l.decisions++
	}
	if a.outcome == storeFailed && a.cause == refused {
		l.refusal[rule] = err
	}
	if a.outcome == otherError && l.otherErr == nil {
		l.otherErr = err
	}
}

// count returns how many answers of rule match o and started after since.
func (l *ledger) count(rule string, o outcome, since time.Time) int {
	l.mu.Lock()
	defer l.mu.Unlock()
	n := 0
	for _, a := range l.answers[rule] {
		if a.outcome == o && !a.start.Before(since) {
			n++
		}
	}
	return n
}

// tail describes rule's last n answers, for a failure message.
func (l *ledger) tail(rule string, n int) string {
	l.mu.Lock()
	defer l.mu.Unlock()
	as := l.answers[rule]
	var b strings.Builder
	for _, a := range as[max(0, len(as)-n):] {
		switch a.outcome {
		case admitted:
			b.WriteByte('A')
		case denied:
			b.WriteByte('D')
		case storeFailed:
			b.WriteString([]string{"t", "u", "r"}[a.cause])
		default:
			b.WriteByte('?')
		}
	}
	return fmt.Sprintf("%s: %d answers, last %s (A admitted, D denied, store errors t timed out, u unreplicated, r refused: %v)", rule, len(as), b.String(), l.refusal[rule])
}

// decided returns how many answers, of every rule, the store decided.
func (l *ledger) decided() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.decisions
}

// exhausted reports whether rule's last n answers, all started after since,
// were denials, not counting store timeouts among them: on a loaded
// machine the store timeout ends calls to a healthy store (and WAIT's
// timeout, replicas that are in sync), and those are not the store's
// answer. Any other store error breaks the run.
func (l *ledger) exhausted(rule string, n int, since time.Time) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	as := l.answers[rule]
	for i := len(as) - 1; i >= 0 && n > 0; i-- {
		a := as[i]
		if a.start.Before(since) {
			return false
		}
		switch {
		case a.outcome == storeFailed && a.cause != refused:
		case a.outcome == denied:
			n--
		default:
			return false
		}
	}
	return n == 0
}

// ack is units a store acknowledged to a node: a check it allowed, or the
// credits of a lease it granted.
type ack struct {
	rule       string
	start, end time.Time
	units      int64
}

// acked returns the units acknowledged for rule by calls that started
// before until and ended after from: all that a primary killed at until can
// have acknowledged after from.
func (l *ledger) acked(rule string, from, until time.Time) int64 {
	l.mu.Lock()
	defer l.mu.Unlock()
	var n int64
	for _, a := range l.acks {
		if a.rule == rule && a.start.Before(until) && !a.end.Before(from) {
			n += a.units
		}
	}
	return n
}

// ackedStarted returns the units acknowledged for rule by calls that
// started in [from, until).
func (l *ledger) ackedStarted(rule string, from, until time.Time) int64 {
	l.mu.Lock()
	defer l.mu.Unlock()
	var n int64
	for _, a := range l.acks {
		if a.rule == rule && !a.start.Before(from) && a.start.Before(until) {
			n += a.units
		}
	}
	return n
}

// countingStore records in log every unit its store acknowledges, under the
// first of rules its key names.
type countingStore struct {
	gale.Store
	rules []string
	log   *ledger
}

func (s countingStore) note(key string, start time.Time, units int64) {
	end := time.Now()
	for _, r := range s.rules {
		if strings.Contains(key, r) {
			s.log.mu.Lock()
			s.log.acks = append(s.log.acks, ack{rule: r, start: start, end: end, units: units})
			s.log.mu.Unlock()
			return
		}
	}
}

func (s countingStore) Check(ctx context.Context, key string, r gale.Rule, cost int64, now time.Time) (gale.Decision, error) {
	start := time.Now()
	d, err := s.Store.Check(ctx, key, r, cost, now)
	if err == nil && d.Allowed {
		s.note(key, start, cost)
	}
	return d, err
}

func (s countingStore) Lease(ctx context.Context, key string, r gale.Rule, min, max int64, now time.Time) (gale.Grant, error) {
	start := time.Now()
	g, err := s.Store.Lease(ctx, key, r, min, max, now)
	if err == nil && g.Granted > 0 {
		s.note(key, start, g.Granted)
	}
	return g, err
}

// errorPause is how long a caller waits after a store error.
const errorPause = 5 * time.Millisecond

// drive sends rule's request to e from callers goroutines until stop is
// closed, stamping each with stamp(), and records every answer in log. The
// returned function waits for the goroutines.
func drive(e *engine.Engine, rule string, callers int, stamp func() time.Time, log *ledger, stop <-chan struct{}) (wait func()) {
	var wg sync.WaitGroup
	req := &engine.Request{Domain: domain, Descriptors: []engine.Descriptor{{Entries: []engine.Entry{{Key: rule, Value: "v"}}}}}
	for range callers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				select {
				case <-stop:
					return
				default:
				}
				// Generous: the engine's StoreTimeout, not this, must end a
				// call to a dead store.
				ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
				a := answer{start: time.Now()}
				resp, err := e.Decide(ctx, req, stamp())
				cancel()
				a.end = time.Now()
				switch {
				case err == nil && resp.Code == engine.CodeOK:
					a.outcome = admitted
				case err == nil && resp.Code == engine.CodeOverLimit:
					a.outcome = denied
				case errors.Is(err, gale.ErrStore):
					a.outcome, a.cause = storeFailed, causeOf(err)
				default:
					a.outcome = otherError
				}
				log.add(rule, a, err)
				if a.outcome == storeFailed {
					// Pace a caller the store failed, as a client backs
					// off: a dead primary refuses at once, and callers
					// spinning on it would starve the sentinels.
					select {
					case <-stop:
						return
					case <-time.After(errorPause):
					}
				}

			}
		}()
	}
	return wg.Wait
}
