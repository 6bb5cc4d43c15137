package model

import (
	"encoding/binary"
	"fmt"
	"math"
	"slices"
	"time"

	"github.com/throttlekit/throttlekit/pkg/gale"
	"github.com/throttlekit/throttlekit/pkg/rlqs"
)

// The RLQS model explores the Rate Limit Quota Service one level out from
// the leasing model: Envoys are the nodes, an assignment is the lease. A
// few Envoys enforce token buckets as Envoy's rate_limit_quota filter does
// (global_client_impl.cc): a new bucket starts full; an "equal" assignment
// (same max_tokens and tokens_per_fill) keeps the live bucket and its
// tokens but restarts the TTL; a different one replaces the bucket, full
// (older Envoys) or at the old bucket's remaining ratio (Ratio: newer
// ones); on expiry the bucket is gone and the no-assignment DENY_ALL
// applies; tokens refill continuously at tokens_per_fill per fill_interval,
// capped at max_tokens, and a request takes one whole token. The first
// request of the bucket is denied (no assignment yet) and reported at once
// (the subscription); the others are reported on a timer. One or two
// serving sidecars each run the REAL rlqs.Machine for the bucket over one
// abstract store (a count per window; leases granted up to what is left,
// returns to the window in place), and carry out what it returns.
//
// What is interleaved: requests at any step; reports at their timer's
// instants in any order; assignments delivered in order per stream, each
// at any step up to MaxLatency quanta after it was sent; lease replies
// landing likewise; the sidecar's ticks at the instants it asked for;
// stream resets (the sidecar sees the stream leave; the Envoy keeps its
// cached bucket and reconnects, to either sidecar, at its next report); a
// sidecar dying (it restarts empty: what it leased stays charged, its
// streams reset, its lease reply is lost). Reports reach the sidecar in the
// step that sends them: their order across Envoys is the interleaving's,
// and their delay only shifts a demand estimate.
//
// Time is one clock for Envoys, sidecars and the store, in quanta of
// 500 ms, and the machine's Guard is one quantum. A bucket's TTL ends at an
// instant; it admits at the instants before it. So MaxLatency 0 (any order
// within an instant) and 1 (a Guard late) are delivery within the Guard,
// which the bound assumes; 2 is past it.

// rlqsQuantum is the model's unit of time; rlqsGuard the machine's Guard.
const (
	rlqsQuantum = 500 * time.Millisecond
	rlqsGuard   = rlqsQuantum
)

// rlqsBase is instant 0, the start of a window of 2 s and of 3 s.
var rlqsBase = time.Unix(1_800_000_000, 0)

// RLQSConfig is an RLQS model instance. Validate says what is accepted; it
// is a small value: pass it by value.
type RLQSConfig struct {
	// Envoys 1..3 share one bucket through Sidecars 1..2.
	Envoys, Sidecars int
	// Limit is L per window, 1..4; WindowSeconds the window, 2..3; Windows
	// bounds the exploration, 2..3.
	Limit, WindowSeconds, Windows int
	// ReportEvery is the Envoys' report interval in quanta, 2..16.
	ReportEvery int
	// MaxLatency is the most quanta an assignment or a lease reply takes
	// to land, 0..3: ≤ 1 (the Guard) is what the bound assumes.
	MaxLatency int
	// Resets and Deaths are how many stream resets and sidecar deaths a
	// run may see, 0..2 and 0..1.
	Resets, Deaths int
	// Ratio: a replaced bucket starts at the old one's remaining ratio
	// (newer Envoys); false: full (older ones, the worse case).
	Ratio bool
	// AllowAll: the Envoys' no_assignment_behavior is Envoy's default,
	// ALLOW_ALL, not DENY_ALL. A bucket's first request is admitted, and
	// so is any request while the Envoy holds no action in force: before
	// its first answer (excused: the bound is then L plus one first
	// request per Envoy) or after (not excused: an expiry the sidecar
	// did not cover). Without resets, deaths or latency past the Guard.
	AllowAll bool
	// Fault breaks every sidecar's machine (tests only).
	Fault rlqs.Fault
}

// Validate reports whether c can be explored.
func (c RLQSConfig) Validate() error {
	switch {
	case c.Envoys < 1 || c.Envoys > 3 || c.Sidecars < 1 || c.Sidecars > 2:
		return fmt.Errorf("%w: %d Envoys on %d sidecars: want 1..3 on 1..2", ErrInvalidConfig, c.Envoys, c.Sidecars)
	case c.Limit < 1 || c.Limit > 4 || c.WindowSeconds < 2 || c.WindowSeconds > 3 || c.Windows < 2 || c.Windows > 3:
		return fmt.Errorf("%w: limit %d, window %d s, %d windows: want 1..4, 2..3, 2..3", ErrInvalidConfig, c.Limit, c.WindowSeconds, c.Windows)
	case c.ReportEvery < 2 || c.ReportEvery > 16 || c.MaxLatency < 0 || c.MaxLatency > 3:
		return fmt.Errorf("%w: report every %d, latency %d: want 2..16, 0..3", ErrInvalidConfig, c.ReportEvery, c.MaxLatency)
	case c.Resets < 0 || c.Resets > 2 || c.Deaths < 0 || c.Deaths > 1:
		return fmt.Errorf("%w: %d resets, %d deaths: want 0..2, 0..1", ErrInvalidConfig, c.Resets, c.Deaths)
	case c.AllowAll && (c.Resets > 0 || c.Deaths > 0):
		return fmt.Errorf("%w: ALLOW_ALL with resets or deaths: an Envoy without a stream admits unmetered once its assignment expires", ErrInvalidConfig)
	}
	return nil
}

// RLQSState is one global state of the RLQS model.
type RLQSState struct {
	// Q is the instant, in quanta from the start; Used what the store has
	// leased in the window in place; Admitted what the Envoys admitted in
	// it (by their clock, the same one); First how many of those were
	// admitted before their Envoy's first answer (AllowAll: excused).
	Q, Used, Admitted, First int
	// Resets and Deaths are the stream resets and sidecar deaths so far.
	Resets, Deaths int
	Envoys         []RLQSEnvoy
	Sidecars       []RLQSSidecar
}

// RLQSEnvoy is one Envoy's filter state for the bucket.
type RLQSEnvoy struct {
	// Sidecar is the sidecar its stream is on, -1 for none; Gen counts the
	// streams it opened (the stream's name with the Envoy's index); Conn
	// counts the connections it opened (its streams' group with the
	// Envoy's index: a reconnect on the same connection is the same
	// group, and takes the left stream's record over).
	Sidecar, Gen, Conn int
	// Subscribed: its first request has been made and reported; Told: an
	// action has reached it since.
	Subscribed, Told bool
	// The token bucket, when Has: Max is max_tokens; Tokens are in units
	// of 1/PerToken token (PerToken = quanta per refilled token); it admits
	// at instants before Expiry.
	Has                           bool
	Max, Tokens, PerToken, Expiry int
	// Allowed since the last report, made at LastReport. (A request
	// denied changes no state but the next report's count, which the
	// report step chooses: 0 or 1 denied, whatever happened — more
	// behaviours than Envoy's, never fewer.)
	Allowed, LastReport int
	// Replaced: a different assignment replaced its live bucket (a
	// reconnect's), at some point.
	Replaced bool
	// Inbox holds the assignments sent on its stream, in order.
	Inbox []RLQSMessage
}

// RLQSMessage is an assignment in flight to an Envoy.
type RLQSMessage struct {
	Max, TTL, PerToken, Sent int // TTL and Sent in quanta
	// Deny is a blanket DENY_ALL for TTL (rlqs.Assignment.Deny): a
	// stream left without a share of its window.
	Deny bool
	// Fresh: the token bucket of a top-up (rlqs.Assignment.Fresh), and
	// the DENY_ALL sent ahead of it.
	Fresh bool
}

// RLQSSidecar is one serving sidecar: its machine's bucket, the instant it
// must tick at (-1 for none), and its lease reply in flight.
type RLQSSidecar struct {
	Bucket rlqs.Bucket
	Wake   int
	Reply  *RLQSReply
}

// RLQSReply is a lease the store granted whose reply has not landed.
type RLQSReply struct {
	ID    uint64
	Grant gale.Grant
	Sent  int
}

// RLQSStep is one transition of the RLQS model.
type RLQSStep struct {
	Kind          string
	Envoy, Target int
}

func (s RLQSStep) String() string {
	switch s.Kind {
	case "time":
		return "time passes a quantum"
	case "tick", "reply lands", "dies":
		return fmt.Sprintf("sidecar %d: %s", s.Target, s.Kind)
	case "reconnects and reports", "reconnects and reports with a denial",
		"reconnects on a new connection and reports", "reconnects on a new connection and reports with a denial":
		return fmt.Sprintf("Envoy %d: %s to sidecar %d", s.Envoy, s.Kind, s.Target)
	}
	return fmt.Sprintf("Envoy %d: %s", s.Envoy, s.Kind)
}

// RLQSTransition is a step and the state it leads to.
type RLQSTransition struct {
	Step  RLQSStep
	After RLQSState
}

func (c RLQSConfig) quantaPerWindow() int {
	return int(time.Duration(c.WindowSeconds) * time.Second / rlqsQuantum)
}

func (c RLQSConfig) machine() *rlqs.Machine {
	return &rlqs.Machine{Limit: int64(c.Limit), Window: time.Duration(c.WindowSeconds) * time.Second, Guard: rlqsGuard, Fault: c.Fault}
}

func rlqsInstant(q int) time.Time { return rlqsBase.Add(time.Duration(q) * rlqsQuantum) }

// quanta is t in quanta from the start, rounded up; -1 for the zero time.
func quanta(t time.Time) int {
	if t.IsZero() {
		return -1
	}
	d := t.Sub(rlqsBase)
	return int((d + rlqsQuantum - 1) / rlqsQuantum)
}

func streamOf(e, gen int) rlqs.StreamID { return rlqs.StreamID(e*16 + gen + 1) }

// groupOf names Envoy e's connection conn to the machine (its streams'
// group).
func groupOf(e, conn int) uint64 { return uint64(e*16 + conn + 1) }

// Initial is the state before anything happens: Envoy i on sidecar i mod
// Sidecars, nothing requested.
func (c RLQSConfig) Initial() RLQSState {
	s := RLQSState{Envoys: make([]RLQSEnvoy, c.Envoys), Sidecars: make([]RLQSSidecar, c.Sidecars)}
	for i := range s.Envoys {
		s.Envoys[i].Sidecar = i % c.Sidecars
	}
	for i := range s.Sidecars {
		s.Sidecars[i].Wake = -1
	}
	return s
}

// clone copies s shallowly: inboxes and the machines' streams are shared
// until written (an inbox only ever grows into a new array; bucket hands
// sidecar i's machine a bucket of its own).
func (s RLQSState) clone() RLQSState {
	t := s
	t.Envoys = append([]RLQSEnvoy(nil), s.Envoys...)
	t.Sidecars = append([]RLQSSidecar(nil), s.Sidecars...)
	return t
}

// bucket gives sidecar i's machine state of its own in s (a clone), for a
// machine call to change.
func (s *RLQSState) bucket(i int) *rlqs.Bucket {
	b := &s.Sidecars[i].Bucket
	b.Streams = append([]rlqs.Stream(nil), b.Streams...)
	b.Left = append([]rlqs.Stream(nil), b.Left...)
	return b
}

// windowEnd is the end of the store's window in place at q.
func (c RLQSConfig) windowEnd(q int) time.Time {
	w := c.quantaPerWindow()
	return rlqsInstant((q/w + 1) * w)
}

// do carries out what sidecar i's machine returned at s.Q.
func (c RLQSConfig) do(s *RLQSState, i int, a rlqs.Actions) {
	now := rlqsInstant(s.Q)
	if r := a.Return; r.Credits > 0 && r.WindowEnd.Equal(c.windowEnd(s.Q)) {
		s.Used = max(s.Used-int(r.Credits), 0)
	}
	for _, x := range a.Assign {
		e, gen := int(x.Stream-1)/16, int(x.Stream-1)%16
		if env := &s.Envoys[e]; env.Sidecar == i && env.Gen == gen {
			msg := RLQSMessage{TTL: int(x.TTL / rlqsQuantum), Sent: s.Q, Deny: x.Deny, Fresh: x.Fresh}
			if x.Fresh {
				// A top-up goes behind a DENY_ALL (rlqs.Assignment.Fresh);
				// the model delivers the two apart, which the server
				// never does: a state between them denies.
				deny := msg
				deny.Deny = true
				env.Inbox = append(env.Inbox[:len(env.Inbox):len(env.Inbox)], deny)
			}
			if !x.Deny {
				msg.Max, msg.PerToken = int(x.MaxTokens), int(x.FillInterval/rlqsQuantum)/int(x.TokensPerFill)
			}
			env.Inbox = append(env.Inbox[:len(env.Inbox):len(env.Inbox)], msg)
		}
	}
	sc := &s.Sidecars[i]
	if a.Lease.ID != 0 {
		end := c.windowEnd(s.Q)
		g := gale.Grant{Now: now, WindowEnd: end, Decision: gale.Decision{ResetAt: end, RetryAfter: end.Sub(now)}}
		if left := int64(c.Limit - s.Used); left >= a.Lease.Min {
			g.Granted = min(left, a.Lease.Max)
			s.Used += int(g.Granted)
		}
		sc.Reply = &RLQSReply{ID: a.Lease.ID, Grant: g, Sent: s.Q}
	}
	sc.Wake = quanta(a.Wake)
	if sc.Wake >= 0 && sc.Wake <= s.Q {
		sc.Wake = -1 // nothing later to tick for
	}
}

// report has Envoy e report on its stream at s.Q, with denied requests
// since its last report.
func (c RLQSConfig) report(s *RLQSState, e, denied int) {
	env := &s.Envoys[e]
	i := env.Sidecar
	elapsed := time.Duration(s.Q-env.LastReport) * rlqsQuantum
	// The Envoy's connection is its streams' group: a reconnect on the
	// same connection takes its old stream's record over
	// (rlqs.Bucket.Left).
	a, err := c.machine().ReportFrom(s.bucket(i), rlqsInstant(s.Q), streamOf(e, env.Gen), groupOf(e, env.Conn), uint64(env.Allowed), uint64(denied), elapsed)
	if err != nil {
		panic(err) // the model's reports are valid: a bug here
	}
	env.Allowed, env.LastReport = 0, s.Q
	c.do(s, i, a)
}

// reportDue reports whether Envoy e's report timer fires at s.Q and has not.
func (c RLQSConfig) reportDue(s RLQSState, e int) bool {
	env := s.Envoys[e]
	return env.Subscribed && s.Q%c.ReportEvery == 0 && env.LastReport < s.Q
}

// Next returns every transition enabled in s. s is not modified.
func (c RLQSConfig) Next(s RLQSState) []RLQSTransition {
	var out []RLQSTransition
	add := func(kind string, e, target int, t RLQSState) {
		out = append(out, RLQSTransition{RLQSStep{kind, e, target}, t})
	}
	m := c.machine()
	now := rlqsInstant(s.Q)
	forced := false
	for e, env := range s.Envoys {
		// A request.
		t := s.clone()
		te := &t.Envoys[e]
		switch {
		case !env.Subscribed && env.Sidecar >= 0 && c.AllowAll:
			te.Subscribed, te.LastReport, te.Allowed = true, s.Q, 1
			t.Admitted++
			t.First++
			c.report(&t, e, 0)
			add("first request, admitted and reported", e, 0, t)
		case !env.Subscribed && env.Sidecar >= 0:
			te.Subscribed, te.LastReport = true, s.Q
			c.report(&t, e, 1)
			add("first request, denied and reported", e, 0, t)
		case env.Subscribed && !env.Has && c.AllowAll && env.Told && t.Admitted-t.First <= c.Limit:
			// ALLOW_ALL with nothing in force: unmetered (once past L,
			// the bound is broken: no need to go on).
			te.Allowed++
			t.Admitted++
			add("admits, with nothing in force", e, 0, t)
		case env.Subscribed && env.Has && env.Tokens >= env.PerToken:
			te.Tokens -= env.PerToken
			te.Allowed++
			t.Admitted++
			add("admits", e, 0, t)
		}
		// Its report timer.
		if c.reportDue(s, e) {
			forced = true
			for denied := range 2 {
				kind := [2]string{"reports", "reports with a denial"}[denied]
				if env.Sidecar >= 0 {
					t := s.clone()
					c.report(&t, e, denied)
					add(kind, e, 0, t)
					continue
				}
				for i := range s.Sidecars {
					for conn, how := range [2]string{"reconnects and ", "reconnects on a new connection and "} {
						t := s.clone()
						t.Envoys[e].Sidecar, t.Envoys[e].Gen, t.Envoys[e].Conn = i, env.Gen+1, env.Conn+conn
						c.report(&t, e, denied)
						add(how+kind, e, i, t)
					}
				}
			}
		}
		// An assignment lands.
		if len(env.Inbox) > 0 {
			forced = forced || env.Inbox[0].Sent+c.MaxLatency <= s.Q
			t := s.clone()
			receive(&t.Envoys[e], s.Q, c.Ratio)
			add("receives an assignment", e, 0, t)
		}
		// Its stream resets.
		if env.Sidecar >= 0 && env.Subscribed && s.Resets < c.Resets {
			t := s.clone()
			t.Resets++
			c.do(&t, env.Sidecar, m.Leave(t.bucket(env.Sidecar), now, streamOf(e, env.Gen)))
			t.Envoys[e].Sidecar, t.Envoys[e].Inbox = -1, nil
			add("stream resets", e, 0, t)
		}
	}
	for i, sc := range s.Sidecars {
		if sc.Wake >= 0 && sc.Wake <= s.Q {
			forced = true
			t := s.clone()
			c.do(&t, i, m.Tick(t.bucket(i), now))
			add("tick", 0, i, t)
		}
		if r := sc.Reply; r != nil {
			forced = forced || r.Sent+c.MaxLatency <= s.Q
			t := s.clone()
			t.Sidecars[i].Reply = nil
			c.do(&t, i, m.Landed(t.bucket(i), r.ID, rlqsInstant(r.Sent), now, r.Grant))
			add("reply lands", 0, i, t)
		}
		if s.Deaths < c.Deaths {
			t := s.clone()
			t.Deaths++
			t.Sidecars[i] = RLQSSidecar{Wake: -1}
			for e := range t.Envoys {
				if t.Envoys[e].Sidecar == i {
					t.Envoys[e].Sidecar, t.Envoys[e].Inbox = -1, nil
				}
			}
			add("dies", 0, i, t)
		}
	}
	if !forced && s.Q+1 < c.Windows*c.quantaPerWindow() {
		t := s.clone()
		t.Q++
		if t.Q%c.quantaPerWindow() == 0 {
			t.Admitted, t.Used, t.First = 0, 0, 0
		}
		for e := range t.Envoys {
			env := &t.Envoys[e]
			if !env.Has {
				continue
			}
			if env.Expiry <= t.Q {
				env.Has, env.Max, env.Tokens, env.PerToken, env.Expiry = false, 0, 0, 0, 0
				continue
			}
			env.Tokens = min(env.Tokens+1, env.Max*env.PerToken)
		}
		add("time", 0, 0, t)
	}
	return out
}

// receive applies the assignment at the head of env's inbox at q, as
// Envoy's filter does.
func receive(env *RLQSEnvoy, q int, ratio bool) {
	msg := env.Inbox[0]
	env.Inbox = env.Inbox[1:]
	env.Told = true
	switch {
	case msg.Deny:
		// A blanket DENY_ALL: no bucket, nothing admitted until it
		// expires (a bucket of no tokens that never refills).
		env.Has, env.Max, env.Tokens, env.PerToken, env.Expiry = true, 0, 0, 1, q+msg.TTL
		return
	case env.Has && env.Max == 0:
		// A DENY_ALL replaced by a token bucket: a new bucket, full.
		env.Tokens = msg.Max * msg.PerToken
	case env.Has && env.Max == msg.Max:
		// Equal: the live bucket and its tokens stay; the TTL restarts.
	case env.Has && ratio:
		env.Tokens = env.Tokens * msg.Max / env.Max
		env.Replaced = true
	case env.Has:
		env.Tokens = msg.Max * msg.PerToken
		env.Replaced = true
	default:
		env.Tokens = msg.Max * msg.PerToken
	}
	env.Has, env.Max, env.PerToken, env.Expiry = true, msg.Max, msg.PerToken, q+msg.TTL
}

// key encodes s for the search: everything a later step reads. Left out:
// the machine's lease counter (a reply's name always matches the lease in
// flight: there is one, and a death drops it), its latest instant (time
// never goes back here), when its lease was asked (nothing reads it), and
// an Envoy's stream count (it only keeps stream names unique).
//
// Envoys are symmetric: nothing a step does depends on an Envoy's index
// but the name of its stream, and a sidecar's machine uses a stream's name
// only to find it (its order is the order of subscription, which the key
// keeps). So each Envoy's encoding carries its stream's place in its
// sidecar's bucket and the machine's record of it, and the key sorts the
// Envoys' encodings: states alike up to renaming Envoys are one. The states
// themselves keep their order, so a path to one is a concrete run.
func (c RLQSConfig) key(s RLQSState) string {
	var b []byte
	v := func(x int) { b = binary.AppendVarint(b, int64(x)) }
	tm := func(t time.Time) { v(quanta(t)) }
	// stream encodes st of a bucket whose lease in flight is lease (0:
	// none): whether that lease was asked for it is what its landing reads.
	stream := func(st rlqs.Stream, lease uint64) {
		b = binary.AppendUvarint(b, math.Float64bits(st.Rate))
		v(b2int(st.Known) | b2int(lease != 0 && st.Asked == lease)<<1 | b2int(st.FailsClosed)<<2)
		tm(st.Window)
		v(int(st.Share))
		tm(st.Live)
		tm(st.Denied)
		tm(st.Expires)
		tm(st.Assigned)
		tm(st.Reported)
		tm(st.Hungry)
	}
	matched := 0
	envoys := make([]string, len(s.Envoys))
	for i, e := range s.Envoys {
		b = b[:0]
		v(e.Sidecar)
		v(b2int(e.Subscribed) | b2int(e.Has)<<1 | b2int(e.Replaced)<<2 | b2int(e.Told)<<3)
		v(e.Max)
		v(e.Tokens)
		v(e.PerToken)
		v(e.Expiry)
		v(e.Allowed)
		v(e.LastReport)
		v(len(e.Inbox))
		for _, msg := range e.Inbox {
			v(msg.Max)
			v(msg.TTL)
			v(msg.PerToken)
			v(msg.Sent)
			v(b2int(msg.Deny) | b2int(msg.Fresh)<<1)
		}
		// The records its left streams keep on each sidecar, and whether
		// each is of its connection now.
		for _, sc := range s.Sidecars {
			for _, l := range sc.Bucket.Left {
				if int(l.Group-1)/16 == i {
					v(1 + b2int(l.Group == groupOf(i, e.Conn)))
					stream(l, 0)
				}
			}
			v(0)
		}
		at := -1
		if e.Sidecar >= 0 {
			streams := s.Sidecars[e.Sidecar].Bucket.Streams
			id := streamOf(i, e.Gen)
			for j := range streams {
				if streams[j].ID == id {
					at = j
				}
			}
			v(at)
			if at >= 0 {
				stream(streams[at], s.Sidecars[e.Sidecar].Bucket.Lease)
				matched++
			}
		}
		envoys[i] = string(b)
	}
	slices.Sort(envoys)
	b = b[:0]
	v(s.Q)
	v(s.Used)
	v(s.Admitted)
	v(s.First)
	v(s.Resets)
	v(s.Deaths)
	for _, sc := range s.Sidecars {
		bk := sc.Bucket
		v(sc.Wake)
		tm(bk.WindowEnd)
		tm(bk.Until)
		v(int(bk.Leased))
		v(int(bk.Sent))
		v(int(bk.Returned))
		v(b2int(bk.Lease != 0))
		tm(bk.RefusedUntil)
		tm(bk.Spent)
		v(b2int(bk.Failing))
		v(len(bk.Streams))
		if r := sc.Reply; r != nil {
			v(int(r.Grant.Granted))
			tm(r.Grant.WindowEnd)
			v(r.Sent)
		} else {
			v(-1)
		}
	}
	if total := func() (n int) {
		for _, sc := range s.Sidecars {
			n += len(sc.Bucket.Streams)
		}
		return n
	}(); total != matched {
		// A stream no Envoy is on: the model never leaves one (a reset
		// leaves, a death empties the machine), but encode it whole.
		for _, sc := range s.Sidecars {
			for _, st := range sc.Bucket.Streams {
				v(int(st.ID))
				stream(st, sc.Bucket.Lease)
			}
		}
	}
	for _, e := range envoys {
		v(len(e))
		b = append(b, e...)
	}
	return string(b)
}

// RLQSSpace is the explored space of an RLQSConfig.
type RLQSSpace struct {
	*search[RLQSState, RLQSStep]
}

// ExploreRLQS enumerates every state reachable from c.Initial(), breadth
// first, up to most states (ErrTooLarge past it), stopping at the first
// state for which stop (when not nil) is true.
func ExploreRLQS(c RLQSConfig, most int, stop func(RLQSState) bool) (*RLQSSpace, error) {
	if err := c.Validate(); err != nil {
		return nil, err
	}
	sp, err := searchFrom(c.Initial(), c.key, c.visit, most, stop)
	return &RLQSSpace{sp}, err
}

// Holds reports whether s keeps the bound: the window in place admits at
// most L (under AllowAll, besides what Envoys admitted before their first
// answer), and the store never leases more than L of it.
func (c RLQSConfig) Holds(s RLQSState) bool {
	return s.Admitted-s.First <= c.Limit && s.Used >= 0 && s.Used <= c.Limit
}

// Find returns a shortest path to a state breaking Holds, and false when
// none does.
func (sp *RLQSSpace) Find(c RLQSConfig) ([]RLQSStep, RLQSState, bool) {
	return sp.first(func(s RLQSState) bool { return !c.Holds(s) })
}

// MostAdmitted is the most any window admits in any state, besides the
// requests AllowAll admits before their Envoy's first answer.
func (sp *RLQSSpace) MostAdmitted() int {
	most := 0
	for _, s := range sp.states {
		most = max(most, s.Admitted-s.First)
	}
	return most
}

// visit hands each transition out of s to emit: Next as the search walks it.
func (c RLQSConfig) visit(s RLQSState, emit func(RLQSStep, RLQSState)) {
	for _, t := range c.Next(s) {
		emit(t.Step, t.After)
	}
}
