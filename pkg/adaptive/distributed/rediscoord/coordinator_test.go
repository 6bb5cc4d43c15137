package rediscoord_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/throttlekit/throttlekit/internal/testenv"
	"github.com/throttlekit/throttlekit/pkg/adaptive/distributed"
	"github.com/throttlekit/throttlekit/pkg/adaptive/distributed/distributedtest"
	"github.com/throttlekit/throttlekit/pkg/adaptive/distributed/rediscoord"
)

var ctx = context.Background()

// t0 is the tests' timeline origin.
var t0 = time.Unix(1_700_000_000, 0)

// newCoordinator starts a Redis server for tb and returns a Coordinator on
// it and a client of its own.
//
// An opts.Timeout of 0 is testenv.StoreDeadline, not the 1s default: these
// tests judge records and grants, not latency, and a loaded machine stalls
// a round trip past a second now and then. The outage test, which measures
// the timeout, builds its own coordinator.
func newCoordinator(tb testing.TB, opts rediscoord.Options) (*rediscoord.Coordinator, *redis.Client) {
	tb.Helper()
	if opts.Timeout == 0 {
		opts.Timeout = testenv.StoreDeadline
	}
	rc := testenv.StartRedis(tb).Client()
	c, err := rediscoord.New(rc, opts)
	if err != nil {
		tb.Fatal(err)
	}
	return c, rc
}

func TestConformance(t *testing.T) {
	c, _ := newCoordinator(t, rediscoord.Options{})
	distributedtest.RunCoordinator(t, func(*testing.T) distributed.Coordinator { return c })
}

// TestDifferential: the memory coordinator and the Redis one, step for step
// on random schedules of joins, restarts, stale and duplicate reports,
// lagging acknowledgements and leases running out; after every step the
// gate's records in Redis, High and AppliedGen included, are Memory's.
func TestDifferential(t *testing.T) {
	c, _ := newCoordinator(t, rediscoord.Options{})
	for seed := range uint64(30) {
		distributedtest.Differential(t, distributed.NewMemory(), shadowed{t, c, distributed.NewMemory()}, seed, 500)
	}
}

// shadowed is a Redis coordinator whose records are checked after every
// heartbeat against a memory coordinator fed the same heartbeats.
type shadowed struct {
	t      *testing.T
	c      *rediscoord.Coordinator
	shadow *distributed.Memory
}

func (s shadowed) Heartbeat(ctx context.Context, gate string, rep distributed.Report, cfg distributed.Config, now time.Time) (distributed.Grant, error) {
	s.t.Helper()
	g, err := s.c.Heartbeat(ctx, gate, rep, cfg, now)
	_, _ = s.shadow.Heartbeat(ctx, gate, rep, cfg, now) // its answers are checked by Differential
	got, rerr := s.c.Records(ctx, gate)
	if want := s.shadow.Records(gate); rerr != nil || !slices.Equal(got, want) {
		s.t.Fatalf("after %+v at %v under %+v: records\n %+v, %v\nwant %+v", rep, now, cfg, got, rerr, want)
	}
	return g, err
}

// step is one heartbeat of a scripted timeline.
type step struct {
	rep distributed.Report
	cfg distributed.Config
	at  time.Duration // after t0
}

// agree runs steps on the Redis coordinator and on a memory one, gate by
// gate, and fails at the first answer or record that differs.
func agree(t *testing.T, c *rediscoord.Coordinator, gate string, steps []step) {
	t.Helper()
	m := distributed.NewMemory()
	for i, s := range steps {
		now := t0.Add(s.at)
		gr, errr := c.Heartbeat(ctx, gate, s.rep, s.cfg, now)
		gm, errm := m.Heartbeat(ctx, gate, s.rep, s.cfg, now)
		if gr != gm || (errr == nil) != (errm == nil) || (errr != nil && errr.Error() != errm.Error()) {
			t.Fatalf("step %d, %+v: Redis %s, %v; memory %s, %v", i, s.rep, show(gr), errr, show(gm), errm)
		}
		if got, err := c.Records(ctx, gate); err != nil || !slices.Equal(got, m.Records(gate)) {
			t.Fatalf("step %d, %+v: records\n %+v, %v\nwant %+v", i, s.rep, got, err, m.Records(gate))
		}
	}
}

var hour = distributed.Config{LeaseTTL: time.Hour}

// show formats g field by field: %v of a Grant is its embedded Status's
// String alone.
func show(g distributed.Grant) string {
	return fmt.Sprintf("{%v share %d gen %d global %d live %d expires %d now %d}", g.Status, g.Share, g.Gen, g.Global, g.Live, g.ExpiresAt, g.Now)
}

// TestEdgesAgreeWithBeat: the values where Lua's doubles and strcoll part
// from Go's integers and byte order give Memory's answers and records.
func TestEdgesAgreeWithBeat(t *testing.T) {
	c, _ := newCoordinator(t, rediscoord.Options{})
	rep := func(node, instance string, seq uint64, local, inflight, demand int, applied uint64) distributed.Report {
		return distributed.Report{Node: node, Instance: instance, Seq: seq, Local: local, Inflight: inflight, Demand: demand, AppliedGen: applied}
	}
	demand := hour
	demand.Split = distributed.Demand
	median := hour
	median.Aggregate = distributed.Median
	const big = rediscoord.MaxCount
	cases := []struct {
		name  string
		steps []step
	}{
		{"SeqAbove2To53IsComparedExactly", []step{
			{rep: rep("a", "i", 1<<53, 10, 0, 0, 0), cfg: hour},
			{rep: rep("a", "i", 1<<53+1, 10, 0, 0, 1), cfg: hour}, // a double would call this equal: stale
			{rep: rep("a", "i", 1<<53+1, 10, 0, 0, 2), cfg: hour},
			{rep: rep("a", "i", 1<<64-2, 10, 0, 0, 2), cfg: hour},
			{rep: rep("a", "i", 1<<64-1, 10, 0, 0, 3), cfg: hour},
			{rep: rep("a", "i", 1<<64-1, 10, 0, 0, 4), cfg: hour},
			{rep: rep("a", "i", 99, 10, 0, 0, 4), cfg: hour}, // fewer digits
		}},
		{"AppliedGenAbove2To53IsClamped", []step{
			{rep: rep("a", "i", 1, 10, 0, 0, 0), cfg: hour},
			{rep: rep("a", "i", 2, 10, 0, 0, 1<<64-1), cfg: hour},
			{rep: rep("b", "i", 1, 10, 0, 0, 1<<53+1), cfg: hour},
			{rep: rep("a", "i", 3, 10, 0, 0, 1<<53), cfg: hour},
		}},
		{"NodesAreOrderedByteByByte", []step{
			// Ten slots among seven nodes: the three first by bytes get 2.
			{rep: rep("b", "i", 1, 10, 0, 0, 0), cfg: hour},
			{rep: rep("B", "i", 1, 10, 0, 0, 0), cfg: hour},
			{rep: rep("a\x00b", "i", 1, 10, 0, 0, 0), cfg: hour},
			{rep: rep("a", "i", 1, 10, 0, 0, 0), cfg: hour},
			{rep: rep("é", "i", 1, 10, 0, 0, 0), cfg: hour},
			{rep: rep("\xff", "i", 1, 10, 0, 0, 0), cfg: hour},
			{rep: rep("\x00", "i", 1, 10, 0, 0, 0), cfg: hour},
			{rep: rep("b", "i", 2, 10, 0, 0, 1), cfg: hour},
			{rep: rep("B", "i", 2, 10, 0, 0, 1), cfg: hour},
			{rep: rep("a\x00b", "i", 2, 10, 0, 0, 1), cfg: hour},
			{rep: rep("a", "i", 2, 10, 0, 0, 1), cfg: hour},
			{rep: rep("é", "i", 2, 10, 0, 0, 1), cfg: hour},
			{rep: rep("\xff", "i", 2, 10, 0, 0, 1), cfg: hour},
			{rep: rep("\x00", "i", 2, 10, 0, 0, 1), cfg: hour},
			{rep: rep("b", "i", 3, 10, 0, 0, 2), cfg: hour},
			{rep: rep("B", "i", 3, 10, 0, 0, 2), cfg: hour},
			{rep: rep("a\x00b", "i", 3, 10, 0, 0, 2), cfg: hour},
			{rep: rep("a", "i", 3, 10, 0, 0, 2), cfg: hour},
		}},
		{"InstancesHoldAnyBytes", []step{
			{rep: rep("a", "i 1\x00\n}", 1, 10, 0, 0, 0), cfg: hour},
			{rep: rep("a", "i 1\x00\n}", 1, 10, 0, 0, 1), cfg: hour}, // stale: the same instance
			{rep: rep("a", "i 1\x00", 2, 10, 0, 0, 1), cfg: hour},    // another instance: a duplicate
			{rep: rep("a", "", 2, 10, 0, 0, 1), cfg: hour},
			{rep: rep("a", "i 1\x00\n}", 2, 10, 0, 0, 1), cfg: hour},
		}},
		{"DemandSplitAtMaxCount", []step{
			{rep: rep("a", "i", 1, big, 0, big, 0), cfg: demand},
			{rep: rep("b", "i", 1, big, 0, big-1, 0), cfg: demand},
			{rep: rep("c", "i", 1, big, big, 3, 0), cfg: demand},
			{rep: rep("a", "i", 2, big, 0, big, 1), cfg: demand},
			{rep: rep("b", "i", 2, big, 0, big-1, 1), cfg: demand},
			{rep: rep("c", "i", 2, big, 0, 3, 1), cfg: demand},
			{rep: rep("a", "i", 3, big, 0, big, 2), cfg: demand},
			{rep: rep("b", "i", 3, big-7, 0, big-1, 2), cfg: demand},
			{rep: rep("c", "i", 3, big, big, 1, 2), cfg: demand},
		}},
		{"MedianOfAnEvenFleet", []step{
			{rep: rep("a", "i", 1, 4, 0, 0, 0), cfg: median},
			{rep: rep("b", "i", 1, big, 0, 0, 0), cfg: median},
			{rep: rep("c", "i", 1, 7, 0, 0, 0), cfg: median},
			{rep: rep("d", "i", 1, 5, 0, 0, 0), cfg: median},
			{rep: rep("a", "i", 2, 4, 0, 0, 1), cfg: median},
		}},
		{"TheReporterSurvivesAndTheRestAreEvicted", []step{
			{rep: rep("a", "i", 1, 10, 0, 0, 0), cfg: hour},
			{rep: rep("b", "i", 1, 10, 0, 0, 0), cfg: distributed.Config{LeaseTTL: time.Microsecond}, at: time.Second},
			{rep: rep("c", "i", 1, 10, 0, 0, 0), cfg: hour, at: time.Second + time.Microsecond},
			{rep: rep("a", "i", 2, 10, 3, 0, 1), cfg: hour, at: 3 * time.Hour},
			{rep: rep("b", "j", 1, 10, 0, 0, 0), cfg: hour, at: 3 * time.Hour},
		}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) { agree(t, c, tc.name, tc.steps) })
	}
}

// TestServerTime: under ServerTime a heartbeat is on Redis's clock — the
// grant's Now and lease end, and eviction — whatever now the caller passes.
func TestServerTime(t *testing.T) {
	c, rc := newCoordinator(t, rediscoord.Options{ServerTime: true})
	cfg := distributed.Config{LeaseTTL: time.Minute}
	before, err := rc.Time(ctx).Result()
	if err != nil {
		t.Fatal(err)
	}
	// The zero time is before 1970: out of range on the caller's clock,
	// ignored on Redis's.
	g, err := c.Heartbeat(ctx, "st", distributed.Report{Node: "a", Instance: "i", Seq: 1, Local: 10}, cfg, time.Time{})
	if err != nil {
		t.Fatal(err)
	}
	after, err := rc.Time(ctx).Result()
	if err != nil {
		t.Fatal(err)
	}
	if g.Now < before.UnixMicro() || g.Now > after.UnixMicro() {
		t.Fatalf("Grant.Now %v, want Redis's TIME, between %v and %v", time.UnixMicro(g.Now), before, after)
	}
	if g.ExpiresAt != g.Now+cfg.LeaseTTL.Microseconds() {
		t.Fatalf("lease end %d, want Redis's now %d + 1 minute", g.ExpiresAt, g.Now)
	}
	// A caller's now a century on does not end a's lease.
	gb, err := c.Heartbeat(ctx, "st", distributed.Report{Node: "b", Instance: "i", Seq: 1, Local: 10}, cfg, t0.AddDate(100, 0, 0))
	if err != nil || gb.Live != 2 || gb.Share != 0 || gb.Now < g.Now || gb.ExpiresAt != gb.Now+cfg.LeaseTTL.Microseconds() {
		t.Fatalf("b at a bogus future now: %s, %v; want a still live and holding all 10, on Redis's clock", show(gb), err)
	}
	recs, err := c.Records(ctx, "st")
	if err != nil || len(recs) != 2 || recs[0].ExpiresAt != g.ExpiresAt || recs[1].ExpiresAt != gb.ExpiresAt {
		t.Fatalf("records %+v, %v: want a's lease to end at %d, b's at %d", recs, err, g.ExpiresAt, gb.ExpiresAt)
	}
	// Redis's clock is not the caller's: a huge TTL is refused on either.
	long := distributed.Config{LeaseTTL: 1 << 62}
	if _, err := c.Heartbeat(ctx, "st", distributed.Report{Node: "a", Instance: "i", Seq: 2, Local: 10}, long, t0); !errors.Is(err, rediscoord.ErrTimeRange) {
		t.Fatalf("a lease ending after 2255: %v, want ErrTimeRange", err)
	}
}

// TestRefusals: what the coordinator refuses, and that a refusal changes
// nothing.
func TestRefusals(t *testing.T) {
	c, rc := newCoordinator(t, rediscoord.Options{})
	ok := distributed.Report{Node: "a", Instance: "first", Seq: 1, Local: 10}
	if _, err := c.Heartbeat(ctx, "r", ok, hour, t0); err != nil {
		t.Fatal(err)
	}
	with := func(f func(*distributed.Report)) distributed.Report { r := ok; r.Seq = 2; f(&r); return r }
	canceled, cancel := context.WithCancel(ctx)
	cancel()
	for _, tc := range []struct {
		name string
		ctx  context.Context
		rep  distributed.Report
		cfg  distributed.Config
		now  time.Time
		want error
		text string
	}{
		{"LocalAboveMaxCount", ctx, with(func(r *distributed.Report) { r.Local = rediscoord.MaxCount + 1 }), hour, t0, distributed.ErrBadReport, "67108864"},
		{"InflightAboveMaxCount", ctx, with(func(r *distributed.Report) { r.Inflight = 1 << 40 }), hour, t0, distributed.ErrBadReport, "inflight"},
		{"DemandAboveMaxCount", ctx, with(func(r *distributed.Report) { r.Demand = 1 << 62 }), hour, t0, distributed.ErrBadReport, "demand"},
		{"EmptyNode", ctx, with(func(r *distributed.Report) { r.Node = "" }), hour, t0, distributed.ErrBadReport, "empty"},
		{"NowBefore1970", ctx, with(func(*distributed.Report) {}), hour, time.Unix(-1, 0), rediscoord.ErrTimeRange, "now"},
		{"LeaseEndingAfter2255", ctx, with(func(*distributed.Report) {}), distributed.Config{LeaseTTL: 1<<63 - 1}, t0, rediscoord.ErrTimeRange, "lease TTL"},
		{"DuplicateNode", ctx, with(func(r *distributed.Report) { r.Instance = "second" }), hour, t0, distributed.ErrDuplicateNode,
			`"a" is live as instance "first", reported by instance "second"`},
		{"CanceledContext", canceled, with(func(*distributed.Report) {}), hour, t0, context.Canceled, "canceled"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := c.Heartbeat(tc.ctx, "r", tc.rep, tc.cfg, tc.now)
			if !errors.Is(err, tc.want) || !contains(err, tc.text) {
				t.Fatalf("%v, want an error wrapping %v that says %q", err, tc.want, tc.text)
			}
		})
	}
	if _, err := c.Heartbeat(ctx, "r", distributed.Report{Node: "a", Instance: "first", Seq: 1, Local: 1}, distributed.Config{}, t0); err == nil {
		t.Fatal("a zero lease TTL accepted")
	}
	// Nothing changed: a's next report is its second grant.
	if g, err := c.Heartbeat(ctx, "r", with(func(*distributed.Report) {}), hour, t0); err != nil || g.Gen != 2 || g.Status != distributed.Granted {
		t.Fatalf("after the refusals: %s, %v; want gen 2", show(g), err)
	}

	// A value the script did not write is refused by name, and left.
	if err := rc.HSet(ctx, c.Key("r"), "x", "1 2 3").Err(); err != nil {
		t.Fatal(err)
	}
	_, err := c.Heartbeat(ctx, "r", with(func(r *distributed.Report) { r.Seq = 3 }), hour, t0)
	if !errors.Is(err, rediscoord.ErrMalformedRecord) || !contains(err, `node "x"`) {
		t.Fatalf("a malformed record: %v, want ErrMalformedRecord naming node x", err)
	}
	if _, err := c.Records(ctx, "r"); !errors.Is(err, rediscoord.ErrMalformedRecord) {
		t.Fatalf("Records of a malformed gate: %v, want ErrMalformedRecord", err)
	}
	if n, _ := rc.HLen(ctx, c.Key("r")).Result(); n != 2 {
		t.Fatalf("the gate holds %d records after the refusal, want a and x", n)
	}
}

func contains(err error, s string) bool { return err != nil && strings.Contains(err.Error(), s) }

func TestNew(t *testing.T) {
	rc := testenv.StartRedis(t).Client()
	for _, tc := range []struct {
		name   string
		client redis.UniversalClient
		opts   rediscoord.Options
	}{
		{"NilClient", nil, rediscoord.Options{}},
		{"NegativeTimeout", rc, rediscoord.Options{Timeout: -time.Second}},
		{"BraceInPrefix", rc, rediscoord.Options{Prefix: "tk:{x}:"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if c, err := rediscoord.New(tc.client, tc.opts); err == nil {
				t.Fatalf("New accepted it: %+v", c)
			}
		})
	}
	c, err := rediscoord.New(rc, rediscoord.Options{Prefix: "app:"})
	if err != nil || c.Key("g") != "app:{g}" {
		t.Fatalf("with a prefix: %v, key %q", err, c.Key("g"))
	}
}

// TestScriptReloaded: after a SCRIPT FLUSH the next heartbeat's EVALSHA
// fails with NOSCRIPT, and its EVAL runs and caches the script again.
func TestScriptReloaded(t *testing.T) {
	c, rc := newCoordinator(t, rediscoord.Options{})
	b := distributed.Report{Node: "a", Instance: "i", Local: 3}
	for seq := uint64(1); seq <= 3; seq++ {
		if err := rc.ScriptFlush(ctx).Err(); err != nil {
			t.Fatal(err)
		}
		b.Seq, b.AppliedGen = seq, seq-1
		if g, err := c.Heartbeat(ctx, "flush", b, hour, t0); err != nil || g.Gen != seq {
			t.Fatalf("beat %d after SCRIPT FLUSH: %s, %v", seq, show(g), err)
		}
	}
}

// TestRetryIsStale: a heartbeat run twice — a client retry after a lost
// reply — is answered the second time with the share the first recorded.
func TestRetryIsStale(t *testing.T) {
	c, _ := newCoordinator(t, rediscoord.Options{})
	rep := distributed.Report{Node: "a", Instance: "i", Seq: 1, Local: 8}
	first, err := c.Heartbeat(ctx, "retry", rep, hour, t0)
	if err != nil {
		t.Fatal(err)
	}
	again, err := c.Heartbeat(ctx, "retry", rep, hour, t0.Add(time.Millisecond))
	if err != nil || again.Status != distributed.Stale || again.Share != first.Share || again.Gen != first.Gen {
		t.Fatalf("the same report again: %s, %v; want stale with %s's share and gen", show(again), err, show(first))
	}
}

// TestGateExpiry: the hash expires in twice the longest lease left among
// its records — a short lease does not shorten a long one's — and an
// eviction lets it expire sooner; a stale report leaves it.
func TestGateExpiry(t *testing.T) {
	c, rc := newCoordinator(t, rediscoord.Options{})
	key := c.Key("exp")
	var setAt time.Time // when the beat that last set the expiry was sent
	pttl := func(what string, want time.Duration) {
		t.Helper()
		got, err := rc.PTTL(ctx, key).Result()
		// Redis's clock runs on while the test does: allow it what this
		// run measured since the beat that set the expiry (a fixed second
		// was missed on a loaded machine), and PTTL's millisecond.
		ran := time.Since(setAt)
		if err != nil || got > want || got < want-ran-time.Millisecond {
			t.Fatalf("%s: PTTL %v, %v; want %v, less at most the %v since the beat that set it", what, got, err, want, ran)
		}
	}
	ten, one := distributed.Config{LeaseTTL: 10 * time.Second}, distributed.Config{LeaseTTL: time.Second}
	beat := func(node string, seq uint64, cfg distributed.Config, at time.Duration) distributed.Grant {
		t.Helper()
		g, err := c.Heartbeat(ctx, "exp", distributed.Report{Node: node, Instance: "i", Seq: seq, Local: 4}, cfg, t0.Add(at))
		if err != nil {
			t.Fatal(err)
		}
		return g
	}
	setAt = time.Now()
	beat("a", 1, ten, 0)
	pttl("a's 10s lease", 20*time.Second)
	setAt = time.Now()
	beat("b", 1, one, 4*time.Second)
	pttl("b's 1s lease beside a's 6s left", 12*time.Second)
	if g := beat("b", 1, one, 5*time.Second); g.Status != distributed.Stale {
		t.Fatalf("b's seq again: %v", g.Status)
	}
	pttl("after a stale report", 12*time.Second) // still b's first beat's
	setAt = time.Now()
	beat("b", 2, one, 10*time.Second) // a evicted
	pttl("b alone", 2*time.Second)
	if keys, _ := rc.HKeys(ctx, key).Result(); !slices.Equal(keys, []string{"b"}) {
		t.Fatalf("fields %q after a's eviction, want b alone", keys)
	}
}
