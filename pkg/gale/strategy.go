package gale

import (
	"math"
	"time"
)

// State is the stored state of one key under one rule. The zero value is a
// key never used (a full budget). Which fields a strategy uses:
//
//	fixed window, quota: Window, Used
//	sliding window:      Window, Used, Prev
//	GCRA:                TAT, Rate, Refilled
//	token bucket:        Tokens, Refilled
//
// All instants are Unix microseconds. A state is meaningless after the
// ExpireAt its last Take reported: from then on it answers exactly as the zero
// State does, so a store may drop it.
//
// A state outlives a change of its rule's figures, Limit and Burst (the
// engine keeps a key across a reload that changes them, as long as the
// algorithm and the Period stay): the new rule reads what the old one
// stored as if it had been in force since the state was written, so a
// changed figure neither resets nor refills a key. A window's count is
// judged by the new Limit (a count above it denies until the window ends).
// A token bucket keeps its tokens, at most the new Burst, refilled at the
// new rate since they were stored. A GCRA bucket keeps its level, the units
// not yet drained when it was stored, drained at the new rate since then:
// its TAT depends on the rate, so the state records the Rate and the
// instant (Refilled) it was written at, and a rule of another Limit
// converts it. A level above a shrunk Burst drains below it before the
// bucket admits again. A converted state still lapses at the ExpireAt the
// old figures gave it: a key nobody asks after a lowered rate reads as a
// fresh one from the instant the old rate would have refilled it.
type State struct {
	Window   int64   // start of the window Used counts
	Used     int64   // units taken in that window
	Prev     int64   // units taken in the window before it (sliding window)
	TAT      int64   // theoretical arrival time (GCRA); 0 when idle
	Rate     int64   // the Limit TAT was written at (GCRA); 0 = the reading rule's
	Tokens   float64 // tokens held at Refilled (token bucket)
	Refilled int64   // when Tokens, or TAT and Rate, were last written; 0 = never
}

// Outcome is a strategy's answer, in Unix microseconds.
type Outcome struct {
	Granted    int64 // units taken: 0 on denial
	Remaining  int64 // units a check at the same instant could still take
	ResetAt    int64 // when the full limit is available again
	RetryAfter int64 // µs until the denied amount could be taken; 0 when granted
	WindowEnd  int64 // end of the window the units were counted in; 0 for GCRA and token bucket
	ExpireAt   int64 // after this instant the new state equals the zero State
	// Over and Overrun are a Charge's: Over is set when the charge did not
	// fit (for a check-only charge, when the state stood past the limit),
	// and Overrun is the units it counted past the limit. Take never sets
	// them.
	Over    bool
	Overrun int64
}

// retryProbes bounds the exact correction of a retry time computed in floating
// point: the first instant at which the cost fits is found by stepping at most
// this many microseconds forward, then at most this many back.
const retryProbes = 8

const usPerDay = int64(24 * time.Hour / time.Microsecond)

// Take takes between min and max units (both ≥ 1, min ≤ max) from state s at
// now: as many as are available up to max, or nothing when fewer than min are
// available. A check of cost c is Take(s, now, c, c). A denial returns s
// unchanged: it consumes nothing. r must be valid.
//
// Take is pure; the Lua scripts of the Redis store perform the same
// arithmetic, operation for operation, and a conformance test holds them to
// it. Keep it that way: every product here is divided before anything is
// added to it, so no compiler can fuse a multiply-add (which Lua never does);
// a new a + b*c must be written a + float64(b*c).
func (r Rule) Take(s State, now, min, max int64) (State, Outcome) {
	now = r.clock(s, now)
	v := r.view(s, now)
	avail := v.available(r, now)
	if avail < min {
		return s, Outcome{
			Remaining:  avail,
			ResetAt:    v.resetAt(r, now),
			RetryAfter: v.retryAt(r, now, min) - now,
			WindowEnd:  v.windowEnd(r),
			ExpireAt:   v.expireAt(r, now),
		}
	}
	g := max
	if avail < g {
		g = avail
	}
	v.take(r, g)
	return v.state(r), Outcome{
		Granted:   g,
		Remaining: v.available(r, now),
		ResetAt:   v.resetAt(r, now),
		WindowEnd: v.windowEnd(r),
		ExpireAt:  v.expireAt(r, now),
	}
}

// Give returns n unused units to s at now. Units of a windowed rule go back
// only to the window that granted them (windowEnd, as Take reported it); once
// that window has ended they are gone, and Give changes nothing. It reports
// whether the state changed; the state's ExpireAt never grows by a Give.
func (r Rule) Give(s State, now, n, windowEnd int64) (State, bool) {
	if n <= 0 {
		return s, false
	}
	v := r.view(s, r.clock(s, now))
	if r.Windowed() && (windowEnd != v.we || v.cur == 0) {
		return s, false
	}
	before := v
	v.give(r, n)
	if v == before {
		return s, false
	}
	return v.state(r), true
}

// clock is the instant a windowed state is read at: now, or the start of
// the window the state counts when now is earlier. A check stamped in window
// W can reach the store after W+1 began (it waited in a queue; its node's
// clock runs behind); read at its stamp, W+1's state would look stale and W
// would start afresh over it, erasing W+1's count. It is counted in the
// newest window instead. Stores on Redis's clock (ServerTime) never see
// time go back; the memory store and Redis on callers' clocks do.
func (r Rule) clock(s State, now int64) int64 {
	if r.Windowed() && now < s.Window {
		return s.Window
	}
	return now
}

// view is a state brought up to date at an instant.
type view struct {
	ws, we    int64   // window bounds (windowed rules)
	cur, prev int64   // units in the current and the previous window
	tat       int64   // GCRA: max(TAT, now)
	tokens    float64 // token bucket: tokens held at last (as stored)
	last      int64   // token bucket: the instant tokens is for
	at        int64   // the instant the view was taken
}

func (r Rule) view(s State, now int64) view {
	v := view{at: now}
	switch r.Algorithm {
	case FixedWindow, Quota:
		v.ws, v.we = r.WindowBounds(now)
		if s.Window == v.ws {
			v.cur = s.Used
		}
	case SlidingWindow:
		v.ws, v.we = r.WindowBounds(now)
		p := int64(r.Period / time.Microsecond)
		switch s.Window {
		case v.ws:
			v.cur, v.prev = s.Used, s.Prev
		case v.ws - p:
			v.prev = s.Used
		}
	case GCRA:
		v.tat = r.convertTAT(s)
		if v.tat < now {
			v.tat = now
		}
	case TokenBucket:
		// Kept as stored: every instant refills from the stored state in one
		// step, so a denial's RetryAfter and a later Take agree to the µs.
		v.tokens, v.last = s.Tokens, s.Refilled
		if s.Refilled == 0 {
			v.tokens, v.last = float64(r.Capacity()), now
		}
		// Tokens stored under a larger Burst: a bucket holds at most its
		// capacity (under an unchanged rule tokens never exceed it). A debt
		// stored under a faster rate: at most this rule's (charge.go).
		if c := float64(r.Capacity()); v.tokens > c {
			v.tokens = c
		}
		if lo := r.minTokens(); v.tokens < lo {
			v.tokens = lo
		}
	}
	return v
}

// maxPeriodUS is MaxPeriod in microseconds.
const maxPeriodUS = int64(MaxPeriod / time.Microsecond)

// convertTAT is the TAT of GCRA state s in r's terms. A TAT written at
// another rate (s.Rate, per the same Period) at s.Refilled held a level of
// (TAT−Refilled)·Rate/Period units then; r keeps that level and drains it
// at its own Limit from then on: TAT' = Refilled + ⌈(TAT−Refilled)·Rate/Limit⌉,
// within MaxPeriod of Refilled so every instant stays exact. It does not
// depend on the instant of the reading: a converted state answers as one r
// had written.
func (r Rule) convertTAT(s State) int64 {
	if s.Rate == 0 || s.Rate == r.Limit || s.Refilled == 0 || s.TAT <= s.Refilled {
		return s.TAT
	}
	d := math.Ceil(float64(s.TAT-s.Refilled) * float64(s.Rate) / float64(r.Limit))
	if d > float64(maxPeriodUS) {
		d = float64(maxPeriodUS)
	}
	return s.Refilled + int64(d)
}

func (r Rule) periodUS() int64 { return int64(r.Period / time.Microsecond) }

// fillTime is how long a token bucket holding tokens takes to fill, rounded up
// to the microsecond.
func (r Rule) fillTime(tokens float64) int64 {
	return int64(math.Ceil((float64(r.Capacity()) - tokens) * float64(r.periodUS()) / float64(r.Limit)))
}

// refill returns the tokens a bucket holding tokens at last holds at t: full
// once its fill time has passed, otherwise topped up at Limit per Period.
func (r Rule) refill(tokens float64, last, t int64) float64 {
	if t <= last {
		return tokens
	}
	if t >= last+r.fillTime(tokens) {
		return float64(r.Capacity())
	}
	tokens = tokens + float64(t-last)*float64(r.Limit)/float64(r.periodUS())
	if b := float64(r.Capacity()); tokens > b {
		return b
	}
	return tokens
}

// refillTo brings a token bucket view up to its instant.
func (v *view) refillTo(r Rule) {
	if v.at > v.last {
		v.tokens, v.last = r.refill(v.tokens, v.last, v.at), v.at
	}
}

// available is how many units can be taken at t from this view (t at or
// after the view's instant; a windowed view is re-derived when t is in a
// later window): the headroom, but never below 0.
func (v view) available(r Rule, t int64) int64 {
	return max(v.headroom(r, t), 0)
}

// headroom is available without its floor: below 0 when the state stands
// past the limit (charges counted past it, charge.go), by the units it
// stands past it, down to minHeadroom. At most the rule's capacity.
func (v view) headroom(r Rule, t int64) int64 {
	var a float64
	switch r.Algorithm {
	case FixedWindow, Quota:
		if t >= v.we {
			return r.Limit
		}
		a = float64(r.Limit - v.cur)
	case SlidingWindow:
		p := r.periodUS()
		ws, cur, prev := v.ws, v.cur, v.prev
		if t >= v.we {
			ws, cur, prev = v.we, 0, v.cur
			if t >= v.we+p {
				return r.Limit
			}
		}
		est := float64(prev)*float64(p-(t-ws))/float64(p) + float64(cur)
		a = math.Floor(float64(r.Limit) - est)
	case GCRA:
		u := float64(v.tat-t) * float64(r.Limit) / float64(r.periodUS())
		if v.tat <= t {
			u = 0
		}
		a = math.Floor(float64(r.Capacity()) - u)
	case TokenBucket:
		a = math.Floor(r.refill(v.tokens, v.last, t))
	}
	if a < minHeadroom {
		return minHeadroom
	}
	if c := r.Capacity(); a > float64(c) {
		return c
	}
	return int64(a)
}

func (v *view) take(r Rule, n int64) {
	switch r.Algorithm {
	case FixedWindow, Quota, SlidingWindow:
		v.cur += n
	case GCRA:
		v.tat += int64(math.Ceil(float64(n) * float64(r.periodUS()) / float64(r.Limit)))
	case TokenBucket:
		v.refillTo(r)
		v.tokens = v.tokens - float64(n)
	}
}

func (v *view) give(r Rule, n int64) {
	switch r.Algorithm {
	case FixedWindow, Quota, SlidingWindow:
		v.cur -= n
		if v.cur < 0 {
			v.cur = 0
		}
	case GCRA:
		v.tat -= int64(math.Floor(float64(n) * float64(r.periodUS()) / float64(r.Limit)))
		if v.tat < v.at {
			v.tat = v.at
		}
	case TokenBucket:
		v.refillTo(r)
		v.tokens = v.tokens + float64(n)
		if b := float64(r.Capacity()); v.tokens > b {
			v.tokens = b
		}
	}
}

func (v view) state(r Rule) State {
	switch r.Algorithm {
	case FixedWindow, Quota:
		return State{Window: v.ws, Used: v.cur}
	case SlidingWindow:
		return State{Window: v.ws, Used: v.cur, Prev: v.prev}
	case GCRA:
		return State{TAT: v.tat, Rate: r.Limit, Refilled: v.at}
	case TokenBucket:
		return State{Tokens: v.tokens, Refilled: v.last}
	}
	return State{}
}

func (v view) windowEnd(r Rule) int64 {
	if r.Windowed() {
		return v.we
	}
	return 0
}

// resetAt is when the whole capacity is available again, when nothing is
// taken meanwhile: once anything is counted, the first microsecond at which
// a check finds it all. A sliding window that counts units in its current
// window is full again only once that window has left the last Period too:
// at the end of the next window, up to two periods away.
func (v view) resetAt(r Rule, now int64) int64 {
	switch r.Algorithm {
	case SlidingWindow:
		if v.cur > 0 {
			return v.we + r.periodUS()
		}
		return v.we
	case TokenBucket:
		// The fill time is rounded in floating point: correct it to the
		// first microsecond at which the bucket reads full, as retryAt does.
		t, c := v.expireAt(r, now), r.Capacity()
		for i := 0; i < retryProbes && v.available(r, t) < c; i++ {
			t++
		}
		for i := 0; i < retryProbes && t > now && v.available(r, t-1) >= c; i++ {
			t--
		}
		return t
	}
	return v.expireAt(r, now)
}

// expireAt is the instant from which the state reads as the zero State.
func (v view) expireAt(r Rule, now int64) int64 {
	switch r.Algorithm {
	case SlidingWindow:
		return v.we + r.periodUS()
	case GCRA:
		return v.tat
	case TokenBucket:
		at := v
		at.refillTo(r)
		return at.last + r.fillTime(at.tokens)
	}
	return v.we
}

// retryAt is the first instant at which need units fit, when nothing else is
// taken meanwhile; for a need of 0 (a check-only charge), the first at which
// the state stands at or below the limit again. A need above the rule's
// capacity never fits: it reports the next full reset (resetAt).
func (v view) retryAt(r Rule, now, need int64) int64 {
	if need > r.Capacity() {
		if at := v.resetAt(r, now); at > now {
			return at
		}
		return now + r.periodUS()
	}
	var t int64
	switch r.Algorithm {
	case FixedWindow, Quota:
		return v.we
	case SlidingWindow:
		p := r.periodUS()
		if v.cur <= r.Limit-need && v.prev > 0 {
			t = v.ws + int64(math.Ceil(float64(p)-float64(r.Limit-need-v.cur)*float64(p)/float64(v.prev)))
		} else {
			t = v.we + int64(math.Ceil(float64(p)-float64(r.Limit-need)*float64(p)/float64(v.cur)))
		}
	case GCRA:
		t = v.tat - int64(math.Floor(float64(r.Capacity()-need)*float64(r.periodUS())/float64(r.Limit)))
	case TokenBucket:
		at := v
		at.refillTo(r)
		t = at.last + int64(math.Ceil((float64(need)-at.tokens)*float64(r.periodUS())/float64(r.Limit)))
	}
	if t <= now {
		t = now + 1
	}
	// The estimate is floating point: correct it to the first microsecond at
	// which the cost fits, stepping forward while it does not fit yet, then
	// back while it already fit a microsecond earlier.
	for i := 0; i < retryProbes && v.headroom(r, t) < need; i++ {
		t++
	}
	for i := 0; i < retryProbes && t-1 > now && v.headroom(r, t-1) >= need; i++ {
		t--
	}
	return t
}

// WindowBounds returns the window [start, end) holding now (Unix µs) for the
// windowed strategies; (0, 0) for GCRA and the token bucket.
func (r Rule) WindowBounds(now int64) (start, end int64) {
	switch r.Algorithm {
	case FixedWindow, SlidingWindow:
		p := r.periodUS()
		start = floorDiv(now, p) * p
		return start, start + p
	case Quota:
		return calendarBounds(r.Calendar, now)
	}
	return 0, 0
}

func calendarBounds(c Calendar, now int64) (start, end int64) {
	switch c {
	case Day:
		start = floorDiv(now, usPerDay) * usPerDay
		return start, start + usPerDay
	case Week:
		// 1970-01-01 was a Thursday; weeks start on Monday, three days earlier.
		const week = 7 * usPerDay
		start = floorDiv(now+3*usPerDay, week)*week - 3*usPerDay
		return start, start + week
	}
	t := time.UnixMicro(now).UTC()
	y, m, _ := t.Date()
	var from, to time.Time
	if c == Month {
		from = time.Date(y, m, 1, 0, 0, 0, 0, time.UTC)
		to = from.AddDate(0, 1, 0)
	} else {
		from = time.Date(y, 1, 1, 0, 0, 0, 0, time.UTC)
		to = from.AddDate(1, 0, 0)
	}
	return from.UnixMicro(), to.UnixMicro()
}

func floorDiv(a, b int64) int64 {
	q := a / b
	if a%b != 0 && (a < 0) != (b < 0) {
		q--
	}
	return q
}
