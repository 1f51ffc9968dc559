package e2e

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"math/rand/v2"
	"net/netip"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes"
	"k8s.io/utils/ptr"

	"example.com/podtoip-controller/e2e/controlplane"
	"example.com/podtoip-controller/e2e/framework"
)

// TestHistoryTruth runs a seeded random scenario of pod lifecycles on the
// simulated cluster while faults hit the controller, records the truth of
// who held which address when from the test's own watch of the pods, each
// change placed in a band by the test's own reads of the pods'
// resourceVersion, and asks the history (kubectl ptp who-had) about
// random addresses at random times to the millisecond, edges included,
// while the scenario runs and once it is at rest: no answer may state as
// certain what was not so, and none covered may leave out a pod that held
// the address. docs/history.md ("How the history is tested against the
// truth") describes it.
//
// The seed is random and printed; -truth.seed N or TRUTH_SEED=N fixes it,
// TRUTH_SEEDS=N runs N seeds one after another, TRUTH_FULL=1 runs the
// full scenario (at least 300 lifecycles and 2,000 queries a seed) instead
// of the short one (about two minutes), and TRUTH_ROUNDS=N runs each fault
// N times a seed (once by default). Without a fixed seed, the
// regression seeds of testdata/truth/seeds.txt of the same length run
// first.
func TestHistoryTruth(t *testing.T) {
	scale := truthShort
	if os.Getenv("TRUTH_FULL") == "1" {
		scale = truthFull
	}
	if v := os.Getenv("TRUTH_ROUNDS"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 1 {
			t.Fatalf("TRUTH_ROUNDS=%q: want a number of rounds of the faults, 1 or more", v)
		}
		scale.rounds = n
	}
	seeds := truthSeeds(t, scale.full)
	c := suite.SimCluster(t)
	sim := suite.On(c.ControlPlane)
	// TRUTH_CONTROLLER and TRUTH_PLUGIN put another build under test (see
	// runTruthSeed): to see what the test finds in an older one.
	for _, env := range []string{"TRUTH_CONTROLLER", "TRUTH_PLUGIN"} {
		if bin := os.Getenv(env); bin != "" {
			t.Logf("under test: %s (%s)", bin, env)
		}
	}
	nodes := framework.TruthNodes()
	kubelets := sim.CreateTruthNodes(t, nodes, seeds[0].Seed)
	t.Cleanup(func() {
		for _, k := range kubelets {
			k.Stop()
			for _, err := range k.Errors() {
				t.Errorf("the truth's kubelet: %v", err)
			}
		}
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		if err := sim.DeleteTruthNodes(ctx, nodes); err != nil {
			t.Errorf("deleting the truth's nodes: %v", err)
		}
	})
	for _, s := range seeds {
		name := fmt.Sprintf("seed=%d", s.Seed)
		t.Run(name, func(t *testing.T) {
			if s.Note != "" {
				t.Logf("regression seed: %s", s.Note)
			}
			runTruthSeed(t, c, kubelets, s.Seed, scale)
		})
	}
}

var truthSeedFlag = flag.String("truth.seed", "", "the seed of TestHistoryTruth (default: TRUTH_SEED, else random)")

// truthSeeds returns the seeds to run: the fixed one (flag, then env)
// followed by random ones up to TRUTH_SEEDS; without a fixed seed, the
// regression seeds of this length first.
func truthSeeds(t *testing.T, full bool) []framework.TruthSeed {
	t.Helper()
	n := 1
	if v := os.Getenv("TRUTH_SEEDS"); v != "" {
		var err error
		if n, err = strconv.Atoi(v); err != nil || n < 1 {
			t.Fatalf("TRUTH_SEEDS=%q: want a positive number", v)
		}
	}
	fixed := *truthSeedFlag
	if fixed == "" {
		fixed = os.Getenv("TRUTH_SEED")
	}
	var seeds []framework.TruthSeed
	if fixed != "" {
		s, err := strconv.ParseUint(fixed, 10, 64)
		if err != nil {
			t.Fatalf("seed %q: %v", fixed, err)
		}
		seeds = append(seeds, framework.TruthSeed{Seed: s, Full: full})
	} else {
		kept, err := framework.ReadTruthSeeds(filepath.Join("testdata", "truth", "seeds.txt"))
		if err != nil {
			t.Fatal(err)
		}
		for _, s := range kept {
			if s.Full == full {
				seeds = append(seeds, s)
			}
		}
	}
	random := n
	if fixed != "" {
		random--
	}
	for range random {
		seeds = append(seeds, framework.TruthSeed{Seed: rand.Uint64N(1 << 40), Full: full})
	}
	var list []string
	for _, s := range seeds {
		list = append(list, strconv.FormatUint(s.Seed, 10))
	}
	t.Logf("TestHistoryTruth: %d %s seed(s): %s (rerun one with TRUTH_SEED=N%s)", len(seeds), map[bool]string{true: "full", false: "short"}[full],
		strings.Join(list, ", "), map[bool]string{true: " TRUTH_FULL=1", false: ""}[full])
	return seeds
}

// truthScale sizes the scenario.
type truthScale struct {
	full bool
	// lifecycles is the least number of pods that must hold an address;
	// queries the number of questions drawn uniformly over the run, and
	// outside the least number judged outside the excused windows (the
	// answers the bound on uncertain ones is taken over), more drawn there
	// if those are too few; aimed the most aimed at parts of holds
	// (Truth.Targets).
	lifecycles, queries, outside, aimed int
	// The stretches, each drawn between its two bounds: calm churn between
	// faults; no controller at all (restart); the history off; answers to
	// IPHistory writes lost; the controllers' connections cut (partition).
	calm, gap, off, lost, partition [2]time.Duration
	// relist: the replicas cut off before their watches expire; stay:
	// how long a bounced pod keeps its second address; retention: the
	// lowered --history-retention; skew: how long a replica with its clock
	// off leads; offset: the most its clock is off by (at least 300 ms,
	// either way).
	relist, stay, retention, skew [2]time.Duration
	offset                        time.Duration
	// rounds of the ten faults, each round in an order the seed draws.
	rounds int
	// churn is the longest the scenario may take to reach lifecycles.
	churn time.Duration
}

var (
	truthShort = truthScale{lifecycles: 60, queries: 400, outside: 300, aimed: 200, rounds: 1, churn: 2 * time.Minute,
		calm: [2]time.Duration{3 * time.Second, 5 * time.Second}, gap: [2]time.Duration{2 * time.Second, 4 * time.Second},
		off: [2]time.Duration{4 * time.Second, 6 * time.Second}, lost: [2]time.Duration{5 * time.Second, 7 * time.Second},
		partition: [2]time.Duration{3 * time.Second, 5 * time.Second},
		relist:    [2]time.Duration{1500 * time.Millisecond, 2500 * time.Millisecond}, stay: [2]time.Duration{100 * time.Millisecond, 2 * time.Second},
		retention: [2]time.Duration{8 * time.Second, 12 * time.Second}, skew: [2]time.Duration{5 * time.Second, 8 * time.Second},
		offset: 1500 * time.Millisecond}
	truthFull = truthScale{full: true, lifecycles: 300, queries: 2000, outside: 600, aimed: 1000, rounds: 1, churn: 15 * time.Minute,
		calm: [2]time.Duration{10 * time.Second, 25 * time.Second}, gap: [2]time.Duration{5 * time.Second, 12 * time.Second},
		off: [2]time.Duration{15 * time.Second, 30 * time.Second}, lost: [2]time.Duration{15 * time.Second, 30 * time.Second},
		partition: [2]time.Duration{10 * time.Second, 20 * time.Second},
		relist:    [2]time.Duration{1500 * time.Millisecond, 2500 * time.Millisecond}, stay: [2]time.Duration{100 * time.Millisecond, 3 * time.Second},
		retention: [2]time.Duration{15 * time.Second, 30 * time.Second}, skew: [2]time.Duration{15 * time.Second, 30 * time.Second},
		offset: 1500 * time.Millisecond}
)

// The faults of the scenario. Their windows are excused from the bound on
// uncertain answers, but for lost-responses': a lost answer hides nothing
// from the controller (it reads the object again), so the history must
// stay as sure as in calm times.
const (
	faultFailover  = "failover"       // SIGKILL the leader; the standby takes over
	faultRestart   = "restart"        // SIGKILL every replica; start them again after a gap
	faultOff       = "history-off"    // the replicas restarted with --history-retention=0 for a stretch
	faultLost      = "lost-responses" // the WriteRelay loses the answers to IPHistory writes that landed, one at a time
	faultPartition = "partition"      // the TCP relay cuts every connection of the controllers, the pod watch's too
	faultLease     = "lease-lost"     // a leader lost its lease (a partition) and exited; a standby took over
	faultRelist    = "relist"         // the replicas cut off, etcd compacted: their watches end with 410 Gone and they list again
	faultBounce    = "bounce"         // a pod moves to another address and back, one UID (a -> b -> a)
	faultHandover  = "handover"       // a pod's address given to a new pod while it terminates
	faultRetention = "retention"      // the replicas restarted with --history-retention lowered, then as before
	faultClock     = "clock"          // a replica whose clock is off (PODTOIP_CLOCK_OFFSET) leads for a stretch
)

// truthFaults are the faults of one round.
var truthFaults = []string{faultFailover, faultRestart, faultOff, faultLost, faultPartition,
	faultRelist, faultBounce, faultHandover, faultRetention, faultClock}

// truthRun is one seed's run.
type truthRun struct {
	t        *testing.T
	c        *controlplane.Cluster
	sim      *framework.Env
	ns       string
	seed     uint64
	scale    truthScale
	rng      *rand.Rand // the fault plan's
	replicas *framework.TruthReplicas
	relays   *framework.TruthRelays
	truth    *framework.Truth
	churn    *truthChurn

	kubelets []*framework.TruthKubelet
	live     *truthLive
	// bounced, handedOver: the pods of those faults; offsets the clock
	// offsets given, relisted the replicas' pod watches that ended 410.
	bounced, handedOver []string
	offsets             []time.Duration
	relisted            int
	// skewed are the stretches a replica with its clock off led.
	skewed []framework.TruthWindow

	windows []framework.TruthWindow
	faults  map[string]int
	// cuts counts the partitions' cuts; lost the answers lost, asked
	// the losses asked for (one at a time).
	cuts, lost, asked int
}

func drawn(rng *rand.Rand, b [2]time.Duration) time.Duration {
	if b[1] <= b[0] {
		return b[0]
	}
	return b[0] + time.Duration(rng.Int64N(int64(b[1]-b[0])+1))
}

func runTruthSeed(t *testing.T, c *controlplane.Cluster, kubelets []*framework.TruthKubelet, seed uint64, scale truthScale) {
	started := time.Now()
	mode := map[bool]string{true: "full", false: "short"}[scale.full]
	rerun := fmt.Sprintf("TRUTH_SEED=%d%s go test -run 'TestHistoryTruth' -v . (in e2e/)", seed, map[bool]string{true: " TRUTH_FULL=1", false: ""}[scale.full])
	t.Logf("seed %d (%s); rerun: %s", seed, mode, rerun)
	sim := suite.On(c.ControlPlane)
	if bin := os.Getenv("TRUTH_CONTROLLER"); bin != "" {
		sim.ControllerBin = bin
	}
	if bin := os.Getenv("TRUTH_PLUGIN"); bin != "" {
		sim.PluginBin = bin
	}
	r := &truthRun{t: t, c: c, sim: sim, seed: seed, scale: scale, faults: map[string]int{}, kubelets: kubelets,
		rng: rand.New(rand.NewPCG(seed, 1))}
	r.ns = simNamespace(t, c)

	// Addresses are the truth nodes', reused from run to run: an earlier
	// run's IPHistories go first.
	if n, err := sim.DeleteHistories(t.Context(), framework.InTruthRange); err != nil {
		t.Fatalf("deleting the IPHistories an earlier run left: %v", err)
	} else if n > 0 {
		t.Logf("deleted %d IPHistories an earlier run left on the truth's addresses", n)
	}
	r.truth = sim.StartTruth(t, r.ns)
	r.relays = sim.StartTruthRelays(t)
	r.replicas = sim.NewTruthReplicas(t, r.relays.Kubeconfig, r.ns)
	r.churn = newTruthChurn(c.Kube, r.ns, seed)
	t.Cleanup(func() { r.teardown(context.Background()) })

	r.replicas.Start(true)
	r.replicas.Start(true)
	first := r.replicas.WaitLeader(30*time.Second, r.supervise)
	spanFrom := first.Leading.Add(time.Second)
	t.Logf("replica %s leads; scenario from %s", first.Name, spanFrom.UTC().Format(time.RFC3339))

	if err := r.churn.setUp(t.Context()); err != nil {
		t.Fatalf("creating the workloads: %v", err)
	}
	r.churn.start()
	r.churn.linger()

	// Questions asked while the scenario runs, right after changes.
	r.live = r.startLive(spanFrom)
	var plan []string
	for range scale.rounds {
		round := slices.Clone(truthFaults)
		r.rng.Shuffle(len(round), func(i, j int) { round[i], round[j] = round[j], round[i] })
		// The lowered retention removes the holds that ended before it:
		// early in the round, so that most of the run stays covered and
		// the answers about it say something.
		i, j := slices.Index(round, faultRetention), r.rng.IntN(3)
		round[i], round[j] = round[j], round[i]
		plan = append(plan, round...)
	}
	t.Logf("fault plan: %v", plan)
	for _, f := range plan {
		r.stretch(drawn(r.rng, scale.calm))
		r.fault(f)
	}
	// The last stretch is calm: outside every window but the one of the
	// last fault's margin.
	r.stretch(scale.calm[1])
	deadline := started.Add(scale.churn)
	for r.truth.Stats().Lifecycles < scale.lifecycles && time.Now().Before(deadline) {
		r.stretch(time.Second)
	}
	r.churn.stop()
	churned := time.Now()
	live := r.live.stop()
	for _, err := range r.live.errs {
		t.Errorf("a live question: %v", err)
	}

	// Let the cluster come to rest: no pod terminating or waiting for an
	// address, nothing changed for two seconds.
	var unsettled []string
	if err := wait.PollUntilContextTimeout(t.Context(), 200*time.Millisecond, time.Minute, true, func(context.Context) (bool, error) {
		r.supervise()
		unsettled = r.truth.Unsettled()
		last, _ := r.truth.LastChange()
		return len(unsettled) == 0 && time.Since(last) > 2*time.Second, nil
	}); err != nil {
		t.Errorf("the pods did not come to rest within a minute of the churn's end: %v", unsettled)
	}
	last, changes := r.truth.LastChange()
	stats := r.truth.Stats()
	t.Logf("churn %v, rest %v later: %d changes, last at %s; %+v; operations %v", churned.Sub(spanFrom).Round(time.Second),
		time.Since(churned).Round(100*time.Millisecond), changes, last.UTC().Format(time.RFC3339Nano), stats, r.churn.counts())

	leader := r.replicas.WaitLeader(30*time.Second, r.supervise)
	if !leader.History {
		t.Fatalf("the scenario ended with replica %s, history off, leading", leader.Name)
	}
	// The leader proves its coverage once its pod watch has reached the
	// present, which a cluster at rest shows only at the watch's bookmarks,
	// about a minute apart: a pod change of no consequence to the history
	// (an annotation of the hostNetwork pod) every half second shows it at
	// once.
	waitStart := time.Now()
	poked := r.churn.poke()
	how, err := sim.WaitTruthCaughtUp(t.Context(), r.truth, "all", last, 2*time.Minute)
	poked()
	if err != nil {
		t.Errorf("the history did not catch up with the pods: %v", err)
	}
	t.Logf("history caught up (%s) %v after the wait began", how, time.Since(waitStart).Round(100*time.Millisecond))
	if how == "open holds" {
		t.Logf("no coverage %q here (%s not served, or not written): waited for the open holds to match the pods instead; an answer without \"covered\" is taken as covered, exit 1 as covered and nobody",
			"all", framework.IPHistoryCoverageGVR.Resource)
	}

	// Up to the last change: the coverage proves the history that far, and
	// an open hold is certain only as far as the coverage goes.
	// Every change placed in its band, from the test's reads of the pods'
	// resourceVersion.
	r.truth.Resolve()
	stats = r.truth.Stats()
	qs := r.queries(spanFrom, last)
	askStart := time.Now()
	if errs := sim.AskAll(t.Context(), c.Kubeconfig, qs, 6); len(errs) > 0 {
		t.Errorf("%d+ queries could not be asked, e.g.: %v", len(errs), errors.Join(errs...))
	}
	qs = append(qs, live...)
	for i := range qs {
		r.truth.Judge(&qs[i], r.windows)
	}
	sum := framework.Summarize(qs)
	reads, failed := r.truth.Clock().Reads()
	t.Logf("asked in %v (bands from %d reads of the pods' resourceVersion, %d failed; %s):\n%s", time.Since(askStart).Round(100*time.Millisecond),
		reads, failed, describeBands(r.truth), sum)
	cut, lost, reread := r.replicas.WriteErrors()
	t.Logf("faults: %v; %d answers to IPHistory writes lost (%d asked for, %d writes through the relay), %d cuts; the replicas read an IPHistory again %d times after a failed write, %d of them after a lost answer, and logged %d IPHistory or coverage requests cut on the connection; leases lost %d; windows: %s",
		r.faults, r.lost, r.asked, len(r.relays.Write.Writes()), r.cuts, reread, lost, cut, r.replicas.LeaseLost, describeWindows(r.windows))

	if len(r.skewed) > 0 {
		sk, ot, nsk, not := r.clockShifts(t.Context())
		t.Logf("clock: offsets %v; the IPHistory's latest hold starts lie %v (median of %d) from the truth's while a replica with its clock off led, %v (median of %d) otherwise",
			r.offsets, sk.Round(time.Millisecond), nsk, ot.Round(time.Millisecond), not)
	}
	enriched := r.enrich(qs)
	r.report(qs, sum, stats, rerun)
	r.check(sum, stats, rerun)
	if enriched.FalseCertain > 0 || enriched.Missed > 0 {
		t.Errorf("seed %d: enrich: %d false-certain and %d missed answers of %d (rerun: %s), e.g.:\n%s",
			r.seed, enriched.FalseCertain, enriched.Missed, enriched.Answers, rerun, strings.Join(enriched.Wrong, "\n"))
	}
	r.teardown(t.Context())
	t.Logf("seed %d done in %v", seed, time.Since(started).Round(time.Second))
}

// enrich asks kubectl ptp enrich, in each of its input formats and with
// --skew 0, about flow records over windows drawn at the uniform
// questions' times (to the nanosecond in JSON, the millisecond in CSV,
// whole seconds in aws-vpc records), 0 to 3 s long, so that they straddle
// changes, bands and coverage gaps; each record's second address is
// another question's. Every answer is judged against the truth over its
// window (Truth.JudgeEnrich).
func (r *truthRun) enrich(qs []framework.TruthQuery) framework.EnrichCounts {
	t := r.t
	rng := rand.New(rand.NewPCG(r.seed, 7))
	var uniform []framework.TruthQuery
	for _, q := range qs {
		if q.Kind == "" && !q.Live {
			uniform = append(uniform, q)
		}
	}
	lengths := []time.Duration{0, time.Millisecond, 37 * time.Millisecond, 400 * time.Millisecond, 1500 * time.Millisecond, 3 * time.Second}
	flows := make([]framework.TruthFlow, len(uniform))
	for i, q := range uniform {
		from := q.At.Add(time.Duration(rng.Int64N(int64(time.Millisecond))))
		flows[i] = framework.TruthFlow{From: from, To: from.Add(lengths[rng.IntN(len(lengths))]),
			Src: q.Address, Dst: uniform[rng.IntN(len(uniform))].Address}
	}
	started := time.Now()
	answers, err := r.sim.EnrichAll(t.Context(), r.c.Kubeconfig, t.TempDir(), flows)
	if err != nil {
		t.Errorf("enrich: %v", err)
		return framework.EnrichCounts{}
	}
	c := r.truth.JudgeEnrichAll(answers)
	t.Logf("enrich: %d records in %v: %s", len(flows), time.Since(started).Round(100*time.Millisecond), c)

	// The export of the same history: enrich from its files must print
	// what it prints from the cluster, and DuckDB's join of docs/sql must
	// give the same columns, over 10,000 records (five windows a
	// question).
	var more []framework.TruthFlow
	for i := range 5 {
		for _, f := range flows {
			f.To = f.From.Add(lengths[(i+rng.IntN(len(lengths)))%len(lengths)])
			more = append(more, f)
		}
	}
	root, err := controlplane.RepoRoot()
	if err != nil {
		t.Fatal(err)
	}
	started = time.Now()
	n, diffs, err := r.sim.ExportAgrees(t.Context(), r.c.Kubeconfig, t.TempDir(), truthSQL(t), filepath.Join(root, "docs", "sql", "duckdb.sql"), more)
	switch {
	case err != nil:
		t.Errorf("export, enrich --history-file and DuckDB: %v", err)
	case len(diffs) > 0:
		t.Errorf("seed %d: the export disagrees with the cluster (enrich --history-file) or DuckDB (docs/sql/duckdb.sql) with enrich, e.g.:\n%s", r.seed, strings.Join(diffs, "\n"))
	default:
		t.Logf("export: %d records enriched from the cluster and from a Parquet export, and joined by docs/sql/duckdb.sql in DuckDB, in %v: 0 differences", n, time.Since(started).Round(100*time.Millisecond))
	}
	return c
}

// truthSQL builds bin/ptpsql once a test process, which runs the DuckDB
// join of docs/sql (controlplane.BuildSQL).
func truthSQL(t *testing.T) string {
	t.Helper()
	sqlOnce.Do(func() {
		root, err := controlplane.RepoRoot()
		if err == nil {
			sqlBin, err = controlplane.BuildSQL(root)
		}
		sqlErr = err
	})
	if sqlErr != nil {
		t.Fatal(sqlErr)
	}
	return sqlBin
}

var (
	sqlOnce sync.Once
	sqlBin  string
	sqlErr  error
)

// check fails the run on a wrong answer, on too many uncertain ones, and
// on a scenario that did not do what it must.
func (r *truthRun) check(sum framework.TruthSummary, stats framework.TruthStats, rerun string) {
	t := r.t
	if sum.FalseCertain > 0 || sum.Missed > 0 {
		t.Errorf("seed %d: %d false-certain and %d missed answers of %d judged (live %d, aimed %d: %v; rerun: %s; keep the seed in e2e/testdata/truth/seeds.txt as a regression case)",
			r.seed, sum.FalseCertain, sum.Missed, sum.Uniform.Judged+sum.Extra.Judged+sum.Aimed.Judged+sum.Live.Judged,
			sum.Live.FalseCertain+sum.Live.Missed, sum.Aimed.FalseCertain+sum.Aimed.Missed, sum.AimedWrong, rerun)
	}
	if share := framework.Share(sum.UncertainOutside, sum.Outside); share > 5 {
		t.Errorf("seed %d: %.1f %% of the %d calm answers (outside the excused windows, farther than %v from a change, no holder terminating) are uncertain, want at most 5 %%",
			r.seed, share, sum.Outside, framework.TruthTolerance)
	}
	if sum.Outside < r.scale.outside {
		t.Errorf("only %d calm answers judged, want at least %d: the bound on uncertain answers says little", sum.Outside, r.scale.outside)
	}
	atRest := sum.Uniform.Judged + sum.Extra.Judged + sum.Aimed.Judged
	if all := atRest + sum.Live.Judged; 5*sum.Live.Judged < all {
		t.Errorf("only %d of %d answers judged were asked live, want at least a fifth", sum.Live.Judged, all)
	}
	if n := sum.Uniform.Asked + sum.Extra.Asked + sum.Aimed.Asked + sum.Live.Asked - atRest - sum.Live.Judged; n > 0 {
		t.Errorf("%d questions were not answered", n)
	}
	if stats.Lifecycles < r.scale.lifecycles {
		t.Errorf("%d pods held an address, want at least %d", stats.Lifecycles, r.scale.lifecycles)
	}
	for what, n := range map[string]int{
		"addresses reused by another pod":               stats.Reused,
		"dual-stack pods":                               stats.DualStack,
		"pods recreated under the same name":            stats.Recreated,
		"pods seen terminating":                         stats.Terminated,
		"pods terminating for a second or more":         stats.LongTerminating,
		"pods finished (Job)":                           stats.Finished,
		"failovers":                                     r.faults[faultFailover],
		"restarts":                                      r.faults[faultRestart],
		"stretches with the history off":                r.faults[faultOff],
		"answers to IPHistory writes lost":              r.lost,
		"cuts of the controllers' connections":          r.cuts,
		"pod watches ended 410 Gone (relists)":          r.relisted,
		"pods bounced a -> b -> a":                      len(r.bounced),
		"addresses handed over while terminating":       stats.HandedOver,
		"retention changes":                             r.faults[faultRetention],
		"stretches led by a replica with its clock off": len(r.skewed),
	} {
		if n == 0 {
			t.Errorf("the scenario had no %s: it did not exercise what it must", what)
		}
	}
	for _, err := range r.churn.errors() {
		t.Errorf("churn: %v", err)
	}
}

// report logs the wrong answers with the truth around them and the
// IPHistory of their address, and writes the whole run to the artifacts.
func (r *truthRun) report(qs []framework.TruthQuery, sum framework.TruthSummary, stats framework.TruthStats, rerun string) {
	t := r.t
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	var wrong []framework.TruthQuery
	for _, q := range qs {
		if q.Verdict.Wrong() {
			wrong = append(wrong, q)
		}
	}
	sort.Slice(wrong, func(i, j int) bool {
		if wrong[i].Address != wrong[j].Address {
			return wrong[i].Address < wrong[j].Address
		}
		return wrong[i].At.Before(wrong[j].At)
	})
	histories := map[string]string{}
	for _, q := range wrong {
		if _, ok := histories[q.Address]; !ok {
			histories[q.Address] = r.sim.HistoryJSON(ctx, q.Address)
		}
	}
	const shown = 25
	for i, q := range wrong {
		if i == shown {
			t.Logf("... and %d more wrong answers (all in the artifacts)", len(wrong)-shown)
			break
		}
		var b strings.Builder
		fmt.Fprintf(&b, "WRONG (seed %d) who-had %s --at %s: exit %d", r.seed, q.Address, q.At.UTC().Format(framework.TruthTimeFormat), q.Exit)
		if q.Live {
			fmt.Fprintf(&b, " [asked live at %s]", q.Asked.UTC().Format("15:04:05.000"))
		}
		if q.Verdict.InBand {
			b.WriteString(" [in a band]")
		} else if q.Verdict.Near {
			fmt.Fprintf(&b, " [within %v of a change]", framework.TruthTolerance)
		}
		if q.Verdict.Window != "" {
			fmt.Fprintf(&b, " [in the %s window]", q.Verdict.Window)
		}
		if q.Kind != "" {
			fmt.Fprintf(&b, " [aimed %s]", q.Kind)
		}
		if q.Extra {
			b.WriteString(" [drawn outside the excused windows]")
		}
		for _, h := range q.Answer.Holders {
			fmt.Fprintf(&b, "\n    answered: %s", h)
		}
		if q.Answer.Covered != nil {
			fmt.Fprintf(&b, "\n    covered: %v", *q.Answer.Covered)
			if q.Answer.CoveredUntil != nil {
				fmt.Fprintf(&b, " (until %s)", q.Answer.CoveredUntil.UTC().Format("15:04:05.000"))
			}
		}
		for _, s := range q.Verdict.FalseCertain {
			fmt.Fprintf(&b, "\n    false-certain: %s", s)
		}
		for _, s := range q.Verdict.Missed {
			fmt.Fprintf(&b, "\n    missed: %s", s)
		}
		fmt.Fprintf(&b, "\n    the truth on %s:", q.Address)
		for _, h := range r.truth.Holds(q.Address) {
			fmt.Fprintf(&b, "\n      %s", h.String())
		}
		t.Log(b.String())
	}
	n := 0
	for addr, h := range histories {
		if n == 10 {
			t.Logf("... and the IPHistories of %d more addresses (in the artifacts)", len(histories)-n)
			break
		}
		t.Logf("IPHistory of %s:\n%s", addr, h)
		n++
	}
	truthByAddr := map[string][]framework.TruthHold{}
	for _, a := range r.truth.Addresses() {
		truthByAddr[a] = r.truth.Holds(a)
	}
	all, err := r.sim.Histories(ctx, framework.InTruthRange)
	if err != nil {
		t.Errorf("reading the run's IPHistories: %v", err)
	}
	out := map[string]any{
		"seed": r.seed, "full": r.scale.full, "rerun": rerun, "namespace": r.ns, "summary": sum, "stats": stats,
		"faults": r.faults, "cuts": r.cuts, "lostAnswers": r.relays.Write.Lost(), "leasesLost": r.replicas.LeaseLost, "windows": r.windows,
		"operations": r.churn.counts(), "wrong": wrong, "expiredWatches": r.relays.Expired(), "bounced": r.bounced,
		"handedOver": r.handedOver, "clockOffsets": r.offsets, "skewed": r.skewed, "histories": histories, "truth": truthByAddr, "queries": qs,
		"allHistories": all,
	}
	b, err := json.MarshalIndent(out, "", " ")
	if err == nil {
		path := filepath.Join(r.sim.Artifacts, fmt.Sprintf("truth-seed-%d.json", r.seed))
		if err = os.WriteFile(path, b, 0o644); err == nil {
			t.Logf("the run's queries, verdicts, truth and windows: %s", path)
		}
	}
	if err != nil {
		t.Errorf("writing the run's report: %v", err)
	}
}

func describeWindows(ws []framework.TruthWindow) string {
	var parts []string
	for _, w := range ws {
		parts = append(parts, fmt.Sprintf("%s %s-%s", w.Kind, w.From.UTC().Format(time.TimeOnly), w.To.UTC().Format(time.TimeOnly)))
	}
	return strings.Join(parts, ", ")
}

// queries draws the questions asked at rest: scale.queries with times
// uniform over [from, to] to the millisecond, addresses uniform over those
// held, one in twenty an address nobody held (off the nodes, or in a
// node's CIDR but never handed out); then, if fewer than scale.outside of
// them are calm (outside the excused windows, farther than TruthTolerance
// from every change of their address, no holder terminating), more drawn
// the same way but kept only there (Extra), until there are; then the
// aimed ones, where the history is most easily wrong: in holds, in
// terminations, after ends, and just outside the band of every change.
func (r *truthRun) queries(from, to time.Time) []framework.TruthQuery {
	rng := rand.New(rand.NewPCG(r.seed, 3))
	held := r.truth.Addresses()
	unused := framework.TruthUnusedAddresses()
	for _, n := range framework.TruthNodes() {
		for _, cidr := range n.PodCIDRs {
			p := netip.MustParsePrefix(cidr)
			for a := p.Addr(); p.Contains(a); a = a.Next() {
				if !slices.Contains(held, a.String()) {
					unused = append(unused, a.String())
				}
			}
		}
	}
	first, end := from.Truncate(time.Millisecond).Add(time.Millisecond), to.Truncate(time.Millisecond)
	span := int64(end.Sub(first) / time.Millisecond)
	if span < 1000 || len(held) == 0 {
		r.t.Fatalf("nothing to ask about: %d addresses held over %v", len(held), to.Sub(from))
	}
	draw := func() framework.TruthQuery {
		at := first.Add(time.Duration(rng.Int64N(span+1)) * time.Millisecond)
		if rng.IntN(20) == 0 {
			return framework.TruthQuery{Address: unused[rng.IntN(len(unused))], At: at, Unused: true}
		}
		return framework.TruthQuery{Address: held[rng.IntN(len(held))], At: at}
	}
	qs := make([]framework.TruthQuery, r.scale.queries)
	n := 0
	for i := range qs {
		qs[i] = draw()
		if r.truth.Calm(qs[i].Address, qs[i].At, r.windows) {
			n++
		}
	}
	extra := 0
	for tries := 0; n < r.scale.outside && tries < 1000*r.scale.outside; tries++ {
		if q := draw(); r.truth.Calm(q.Address, q.At, r.windows) {
			q.Extra = true
			qs = append(qs, q)
			n++
			extra++
		}
	}
	r.t.Logf("%d uniform queries over %v, %d of them calm; %d more drawn in calm times only", r.scale.queries, end.Sub(first), n-extra, extra)
	return append(qs, r.truth.Targets(first, end, rng, r.scale.aimed)...)
}

// describeBands sums up the widths of the truth's bands.
func describeBands(tr *framework.Truth) string {
	var widths []time.Duration
	for _, a := range tr.Addresses() {
		for _, h := range tr.Holds(a) {
			for _, b := range []framework.Band{h.FromBand, h.TermBand, h.ToBand} {
				if !b.IsZero() {
					widths = append(widths, b.Width())
				}
			}
		}
	}
	if len(widths) == 0 {
		return "no bands"
	}
	slices.Sort(widths)
	return fmt.Sprintf("%d bands, widths: median %v, p99 %v, most %v", len(widths), widths[len(widths)/2].Round(time.Millisecond),
		widths[len(widths)*99/100].Round(time.Millisecond), widths[len(widths)-1].Round(time.Millisecond))
}

// truthLive asks questions while the scenario runs: right after changes
// (within 2 s before to 1 s after a change the test's watch delivered in
// the last 3 s) and about the last 8 s, one at a time. The answers are
// judged at the end, when every band is known: a live answer must be as
// right as one at rest, so the coverage may never vouch for a time whose
// holds are not written yet.
type truthLive struct {
	done chan struct{}
	wg   sync.WaitGroup
	mu   sync.Mutex
	qs   []framework.TruthQuery
	errs []error
}

func (r *truthRun) startLive(from time.Time) *truthLive {
	l := &truthLive{done: make(chan struct{})}
	rng := rand.New(rand.NewPCG(r.seed, 4))
	kubeconfig := r.c.Kubeconfig
	l.wg.Go(func() {
		for {
			select {
			case <-l.done:
				return
			case <-time.After(time.Duration(100+rng.IntN(200)) * time.Millisecond):
			}
			now := time.Now()
			q := framework.TruthQuery{Live: true}
			recent := r.truth.RecentChanges(now.Add(-3 * time.Second))
			if len(recent) > 0 && rng.IntN(10) < 6 {
				ch := recent[rng.IntN(len(recent))]
				q.Address, q.Kind = ch.Address, "live: around a change"
				q.At = ch.At.Add(time.Duration(rng.Int64N(int64(3*time.Second))) - 2*time.Second)
				if q.At.After(now) {
					q.At = now
				}
			} else {
				addrs := r.truth.Addresses()
				if len(addrs) == 0 {
					continue
				}
				q.Address, q.Kind = addrs[rng.IntN(len(addrs))], "live: the last seconds"
				q.At = now.Add(-time.Duration(rng.Int64N(int64(8 * time.Second))))
			}
			if q.At.Before(from) {
				continue
			}
			q.At = q.At.Truncate(time.Millisecond)
			q.Asked = time.Now()
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			err := r.sim.WhoHad(ctx, kubeconfig, &q)
			cancel()
			l.mu.Lock()
			l.qs = append(l.qs, q)
			if err != nil && len(l.errs) < 10 {
				l.errs = append(l.errs, err)
			}
			l.mu.Unlock()
		}
	})
	return l
}

// stop ends the live questions and returns them; safe to call twice.
func (l *truthLive) stop() []framework.TruthQuery {
	select {
	case <-l.done:
	default:
		close(l.done)
	}
	l.wg.Wait()
	l.mu.Lock()
	defer l.mu.Unlock()
	return slices.Clone(l.qs)
}

// stretch lets the scenario run for d, supervising the replicas.
func (r *truthRun) stretch(d time.Duration) {
	deadline := time.Now().Add(d)
	for time.Now().Before(deadline) {
		r.supervise()
		framework.Hold(r.t, min(100*time.Millisecond, time.Until(deadline)))
	}
}

// supervise replaces a replica that exited after losing its lease, and
// records the failover that followed as a window.
func (r *truthRun) supervise() {
	for range r.replicas.Supervise() {
		now := time.Now()
		r.faults[faultLease]++
		lease := r.replicas.Lease
		r.window(faultLease, now.Add(-r.replicas.Renew), now.Add(lease+2*framework.MaxRetryInterval(r.replicas.Retry)), true)
	}
}

// window records a fault window [from, to] widened by the lease duration on
// each side.
func (r *truthRun) window(kind string, from, to time.Time, excused bool) {
	m := r.replicas.Lease
	r.windows = append(r.windows, framework.TruthWindow{Kind: kind, From: from.Add(-m), To: to.Add(m), Excused: excused})
}

// fault injects one fault and records its window.
func (r *truthRun) fault(kind string) {
	t := r.t
	r.faults[kind]++
	lease, retry := r.replicas.Lease, r.replicas.Retry
	takeover := framework.CrashTakeoverBound(lease, retry) + 10*time.Second
	switch kind {
	case faultFailover:
		old := r.replicas.WaitLeader(takeover, r.supervise)
		killed := time.Now()
		old.P.Kill()
		next := r.replicas.WaitLeader(takeover, r.supervise)
		t.Logf("failover: leader %s SIGKILLed, %s led %v later", old.Name, next.Name, next.Leading.Sub(killed).Round(time.Millisecond))
		r.window(kind, killed, next.Leading, true)
		r.replicas.Start(true)
	case faultRestart:
		killed := time.Now()
		r.replicas.KillAll()
		gap := drawn(r.rng, r.scale.gap)
		r.stretch(gap)
		r.replicas.Start(true)
		r.replicas.Start(true)
		next := r.replicas.WaitLeader(takeover, r.supervise)
		t.Logf("restart: every replica SIGKILLed, none for %v, %s led %v after the kill", gap.Round(time.Millisecond), next.Name, next.Leading.Sub(killed).Round(time.Millisecond))
		r.window(kind, killed, next.Leading, true)
	case faultOff:
		stopped := time.Now()
		r.replicas.StopAll()
		r.replicas.Start(false)
		r.replicas.Start(false)
		off := r.replicas.WaitLeader(takeover, r.supervise)
		d := drawn(r.rng, r.scale.off)
		r.stretch(d)
		r.replicas.StopAll()
		r.replicas.Start(true)
		r.replicas.Start(true)
		next := r.replicas.WaitLeader(takeover, r.supervise)
		t.Logf("history off: %s led with --history-retention=0 for %v; %s leads with it on %v after the first stop", off.Name,
			d.Round(time.Millisecond), next.Name, next.Leading.Sub(stopped).Round(time.Millisecond))
		r.window(kind, stopped, next.Leading, true)
	case faultLost:
		// One answer at a time is lost, a new loss asked for every
		// 0.5-1.5 s: the next IPHistory write the API server accepts,
		// whichever its address, lands and its answer never reaches the
		// leader. Nothing else is touched: the pod watch and the lease
		// go on.
		from := time.Now()
		before := len(r.relays.Write.Lost())
		end := from.Add(drawn(r.rng, r.scale.lost))
		asked := 0
		for time.Now().Before(end) {
			r.relays.LoseNext()
			asked++
			r.stretch(500*time.Millisecond + time.Duration(r.rng.Int64N(int64(time.Second))))
		}
		r.relays.StopLosing()
		lost := r.relays.Write.Lost()[before:]
		r.asked += asked
		r.lost += len(lost)
		var names []string
		for _, w := range lost {
			names = append(names, fmt.Sprintf("%s %s %s", w.At.UTC().Format("15:04:05.000"), w.Method, cmp.Or(w.Name, "(create)")))
		}
		t.Logf("lost responses: %d of %d losses asked for over %v: %s", len(lost), asked, time.Since(from).Round(time.Millisecond), strings.Join(names, ", "))
		r.window(kind, from, time.Now(), false)
	case faultPartition:
		from := time.Now()
		r.relays.TCP.SetLatency(10*time.Millisecond, 120*time.Millisecond)
		end := from.Add(drawn(r.rng, r.scale.partition))
		cuts, conns := 0, 0
		for time.Now().Before(end) {
			r.stretch(500*time.Millisecond + time.Duration(r.rng.Int64N(int64(time.Second))))
			conns += r.relays.TCP.Cut()
			cuts++
		}
		r.cuts += cuts
		r.relays.TCP.SetLatency(0, 0)
		t.Logf("partition: %d cuts (%d connections) over %v, 10-120 ms latency each way", cuts, conns, time.Since(from).Round(time.Millisecond))
		r.window(kind, from, time.Now(), true)
	case faultRelist:
		// Cut off (a blackhole: nothing moves, no connection closes)
		// while the pods change; etcd compacted to its current revision;
		// every connection then reset: the replicas' watches resume from
		// a resourceVersion that is gone, end with 410 Gone, and their
		// informers list again, learning what changed meanwhile from the
		// pods' last versions only.
		from := time.Now()
		before := r.relays.ExpiredPodWatches()
		r.relays.TCP.Blackhole()
		r.stretch(drawn(r.rng, r.scale.relist))
		var rev int64
		var err error
		for range 5 {
			// The API server's own compactor may race it: then again.
			if rev, err = r.c.CompactEtcd(t.Context()); err == nil {
				break
			}
		}
		if err != nil {
			r.relays.TCP.Restore()
			t.Fatalf("relist: compacting etcd: %v", err)
		}
		r.relays.ExpireWatches(rev)
		conns := r.relays.TCP.Cut()
		r.relays.TCP.Restore()
		want := len(r.replicas.Running())
		deadline := time.Now().Add(takeover)
		for r.relays.ExpiredPodWatches()-before < want && time.Now().Before(deadline) {
			r.stretch(100 * time.Millisecond)
		}
		got := r.relays.ExpiredPodWatches() - before
		r.relays.ExpireWatches(0)
		r.relisted += got
		if got == 0 {
			t.Errorf("relist: no pod watch of the replicas resumed from before the compaction (revision %d) within %v: none was made to list again", rev, takeover)
		}
		t.Logf("relist: replicas cut off for %v, etcd compacted at revision %d, %d connections reset; %d pod watches of %d replicas ended 410 Gone",
			time.Since(from).Round(time.Millisecond), rev, conns, got, want)
		r.window(kind, from, time.Now(), true)
	case faultBounce:
		// A pod of the graceful node moves to another address and back,
		// one UID: a -> b -> a, as a sandbox made again would.
		k := r.gracefulKubelet()
		name := fmt.Sprintf("bounce-%d", r.faults[kind])
		a0 := r.startPodOn(name, 1)
		// Often before the history has written the first address's hold.
		r.stretch(time.Duration(r.rng.Int64N(int64(time.Second))))
		stay := drawn(r.rng, r.scale.stay)
		a, b, err := k.Bounce(t.Context(), r.ns, name, stay, r.stretch)
		if err != nil {
			t.Fatalf("bounce: %v", err)
		}
		r.bounced = append(r.bounced, fmt.Sprintf("%s %v -> %v -> %v (%v on the second)", name, a0, b, a, stay.Round(time.Millisecond)))
		t.Logf("bounce: pod %s moved from %v to %v and back after %v", name, a, b, stay.Round(time.Millisecond))
		r.stretch(time.Second + time.Duration(r.rng.Int64N(int64(time.Second))))
		r.churn.note("delete bounced pod", r.churn.deletePod(t.Context(), name, false))
	case faultHandover:
		// A pod of the graceful node deleted with a grace period; a new
		// pod gets its addresses while it still terminates.
		k := r.gracefulKubelet()
		n := r.faults[kind]
		old, next := fmt.Sprintf("handover-old-%d", n), fmt.Sprintf("handover-new-%d", n)
		addrs := r.startPodOn(old, 6)
		r.stretch(500*time.Millisecond + time.Duration(r.rng.Int64N(int64(time.Second))))
		pod, err := r.c.Kube.CoreV1().Pods(r.ns).Get(t.Context(), old, metav1.GetOptions{})
		if err != nil {
			t.Fatalf("handover: %v", err)
		}
		k.HandOver(pod.UID, next)
		if err := r.churn.deletePod(t.Context(), old, false); err != nil {
			t.Fatalf("handover: deleting %s: %v", old, err)
		}
		got := r.startPodOn(next, 1)
		still := "gone by then"
		if p, err := r.c.Kube.CoreV1().Pods(r.ns).Get(t.Context(), old, metav1.GetOptions{}); err == nil && p.UID == pod.UID {
			still = "still terminating"
		}
		r.handedOver = append(r.handedOver, fmt.Sprintf("%s %v -> %s %v (%s)", old, addrs, next, got, still))
		t.Logf("handover: %s %v deleted (grace 6 s), %s got %v, %s %s", old, addrs, next, got, old, still)
		r.stretch(time.Second + time.Duration(r.rng.Int64N(int64(time.Second))))
		r.churn.note("delete handed-over pod", r.churn.deletePod(t.Context(), next, false))
	case faultRetention:
		stopped := time.Now()
		low := drawn(r.rng, r.scale.retention).Round(time.Second)
		flag := "--history-retention=" + low.String()
		r.replicas.StopAll()
		r.replicas.StartWith(true, nil, flag)
		r.replicas.StartWith(true, nil, flag)
		lowLeader := r.replicas.WaitLeader(takeover, r.supervise)
		// Long enough for a pass that removes the holds past the
		// retention (every half retention below two minutes).
		d := low/2 + 2*time.Second
		r.stretch(d)
		r.replicas.StopAll()
		r.replicas.Start(true)
		r.replicas.Start(true)
		next := r.replicas.WaitLeader(takeover, r.supervise)
		t.Logf("retention: %s led with %s for %v; %s leads with the default %v after the first stop", lowLeader.Name, flag, d,
			next.Name, next.Leading.Sub(stopped).Round(time.Millisecond))
		r.window(kind, stopped, next.Leading, true)
	case faultClock:
		stopped := time.Now()
		off := 300*time.Millisecond + time.Duration(r.rng.Int64N(int64(r.scale.offset-300*time.Millisecond)+1))
		if r.rng.IntN(2) == 0 {
			off = -off
		}
		off = off.Round(time.Millisecond)
		env := []string{"PODTOIP_CLOCK_OFFSET=" + off.String()}
		r.replicas.StopAll()
		skewed := r.replicas.StartWith(true, env)
		lead := r.replicas.WaitLeader(takeover, r.supervise)
		r.replicas.Start(true)
		d := drawn(r.rng, r.scale.skew)
		r.stretch(d)
		killed := time.Now()
		for _, rep := range r.replicas.Running() {
			if len(rep.Env) > 0 {
				rep.P.Kill()
			}
		}
		next := r.replicas.WaitLeader(takeover, r.supervise)
		r.replicas.Start(true)
		r.offsets = append(r.offsets, off)
		r.skewed = append(r.skewed, framework.TruthWindow{Kind: off.String(), From: lead.Leading, To: killed})
		t.Logf("clock: %s (PODTOIP_CLOCK_OFFSET=%s) led for %v; %s leads %v after its kill; its log mentions the offset: %v", skewed.Name, off,
			killed.Sub(lead.Leading).Round(time.Millisecond), next.Name, next.Leading.Sub(killed).Round(time.Millisecond),
			strings.Contains(strings.ToLower(skewed.P.Output()), "offset"))
		r.window(kind, stopped, next.Leading, true)
	default:
		t.Fatalf("unknown fault %q", kind)
	}
}

// teardown ends the run: churn stopped, the pods gone while a controller
// still runs (their mirrors go with them), the replicas stopped, the
// IPHistories of the truth's addresses deleted. It is safe to call twice.
func (r *truthRun) teardown(ctx context.Context) {
	t := r.t
	r.churn.stop()
	r.churn.stopLinger()
	if r.live != nil {
		r.live.stop()
	}
	r.relays.ExpireWatches(0)
	kube := r.c.Kube
	zero := int64(0)
	bg := metav1.DeletePropagationBackground
	_ = kube.AppsV1().Deployments(r.ns).DeleteCollection(ctx, metav1.DeleteOptions{PropagationPolicy: &bg}, metav1.ListOptions{})
	_ = kube.BatchV1().Jobs(r.ns).DeleteCollection(ctx, metav1.DeleteOptions{PropagationPolicy: &bg}, metav1.ListOptions{})
	err := wait.PollUntilContextTimeout(ctx, 200*time.Millisecond, time.Minute, true, func(ctx context.Context) (bool, error) {
		_ = kube.CoreV1().Pods(r.ns).DeleteCollection(ctx, metav1.DeleteOptions{GracePeriodSeconds: &zero}, metav1.ListOptions{})
		list, err := kube.CoreV1().Pods(r.ns).List(ctx, metav1.ListOptions{})
		if err != nil {
			return false, nil
		}
		for _, p := range list.Items {
			if i := slices.Index(p.Finalizers, truthLinger); i >= 0 {
				patch := fmt.Sprintf(`[{"op":"test","path":"/metadata/finalizers/%d","value":%q},{"op":"remove","path":"/metadata/finalizers/%d"}]`, i, truthLinger, i)
				_, _ = kube.CoreV1().Pods(r.ns).Patch(ctx, p.Name, types.JSONPatchType, []byte(patch), metav1.PatchOptions{})
			}
		}
		return len(list.Items) == 0, nil
	})
	if err != nil {
		t.Errorf("the run's pods are not gone a minute after their deletion: %v", err)
	}
	if len(r.replicas.Running()) > 0 {
		_ = wait.PollUntilContextTimeout(ctx, 200*time.Millisecond, 30*time.Second, true, func(ctx context.Context) (bool, error) {
			list, err := r.sim.Mirrors(r.ns).List(ctx, metav1.ListOptions{})
			return err == nil && len(list.Items) == 0, nil
		})
		r.replicas.StopAll()
	}
	if _, err := r.sim.DeleteHistories(ctx, framework.InTruthRange); err != nil {
		t.Errorf("deleting the run's IPHistories: %v", err)
	}
}

// truthChurn drives the pods of one run: Deployments scaled up and down,
// Jobs, pods deleted with and without a grace period, pods recreated under
// the same name, a hostNetwork pod. Its choices come from the seed; it
// calls no t.Fatal, so it runs in goroutines of its own.
//
// kwok ends a terminating pod at once (a deletion with grace period 0),
// whatever its grace period; the graceful node's kubelet (the test's own)
// lets it run through part of it, so that its pods are terminating for
// seconds. The lingering pods carry the finalizer truthLinger, which the
// churn removes at a time drawn up to the pod's truthLingerMax after its
// termination began: their deletion is final (grace period 0, the address
// released) while their object stays, as finalizers keep it.
type truthChurn struct {
	kube kubernetes.Interface
	ns   string

	mu         sync.Mutex
	rng        *rand.Rand
	ops        map[string]int
	errs       []error
	busy       map[string]bool // bare pods an operation holds
	jobs       int
	due        map[types.UID]time.Time
	done       chan struct{}
	wg         sync.WaitGroup
	halts      sync.Once
	lingerDone chan struct{}
	lingerWG   sync.WaitGroup
	lingerStop sync.Once
}

const (
	truthLinger    = "truth.example.com/linger"
	truthLingerMax = "truth.example.com/linger-max"
)

// The workloads: Deployments with their grace period, whether they run on
// the graceful node, how long their pods linger after their deletion is
// final at most (0: they do not), and their most replicas; the names of the
// bare pods.
var (
	truthDeployments = []struct {
		name     string
		grace    int64
		graceful bool
		linger   time.Duration
		max      int
	}{{"web", 1, false, 0, 7}, {"api", 4, false, 0, 5}, {"slow", 8, false, 6 * time.Second, 3}, {"grace", 6, true, 0, 4}}
	truthBarePods = []string{"bare-0", "bare-1", "bare-2", "bare-3", "bare-4", "bare-5"}
)

func newTruthChurn(kube kubernetes.Interface, ns string, seed uint64) *truthChurn {
	return &truthChurn{kube: kube, ns: ns, rng: rand.New(rand.NewPCG(seed, 2)), ops: map[string]int{},
		busy: map[string]bool{}, due: map[types.UID]time.Time{}, done: make(chan struct{}), lingerDone: make(chan struct{})}
}

// lingering makes the pods of meta linger terminating up to most.
func lingering(meta *metav1.ObjectMeta, most time.Duration) {
	if most <= 0 {
		return
	}
	meta.Finalizers = append(meta.Finalizers, truthLinger)
	if meta.Annotations == nil {
		meta.Annotations = map[string]string{}
	}
	meta.Annotations[truthLingerMax] = most.String()
}

// linger releases the lingering pods, each at a time drawn up to its
// truthLingerMax (at least 1 s) after it was first seen terminating.
func (c *truthChurn) linger() {
	c.lingerWG.Go(func() {
		ctx, cancel := context.WithCancel(context.Background())
		defer cancel()
		go func() {
			<-c.lingerDone
			cancel()
		}()
		for {
			select {
			case <-c.lingerDone:
				return
			case <-time.After(100 * time.Millisecond):
			}
			list, err := c.kube.CoreV1().Pods(c.ns).List(ctx, metav1.ListOptions{})
			if err != nil {
				c.note("linger", err)
				continue
			}
			for _, p := range list.Items {
				if p.DeletionTimestamp == nil || !slices.Contains(p.Finalizers, truthLinger) {
					continue
				}
				c.mu.Lock()
				due, ok := c.due[p.UID]
				if !ok {
					most, _ := time.ParseDuration(p.Annotations[truthLingerMax])
					most = max(most, time.Second)
					due = time.Now().Add(time.Second + time.Duration(c.rng.Int64N(int64(most-time.Second)+1)))
					c.due[p.UID] = due
				}
				c.mu.Unlock()
				if time.Now().Before(due) {
					continue
				}
				var keep []string
				for _, f := range p.Finalizers {
					if f != truthLinger {
						keep = append(keep, f)
					}
				}
				patch, _ := json.Marshal(map[string]any{"metadata": map[string]any{"finalizers": keep, "resourceVersion": p.ResourceVersion}})
				_, err := c.kube.CoreV1().Pods(c.ns).Patch(ctx, p.Name, types.MergePatchType, patch, metav1.PatchOptions{})
				c.note("release lingering pod", err)
			}
		}
	})
}

// poke annotates the hostNetwork pod every half second until the returned
// function is called: a pod change that changes no hold.
func (c *truthChurn) poke() (stop func()) {
	done := make(chan struct{})
	var wg sync.WaitGroup
	wg.Go(func() {
		for i := 0; ; i++ {
			select {
			case <-done:
				return
			case <-time.After(500 * time.Millisecond):
			}
			patch := fmt.Sprintf(`{"metadata":{"annotations":{"truth.example.com/tick":"%d"}}}`, i)
			_, err := c.kube.CoreV1().Pods(c.ns).Patch(context.Background(), "host-agent", types.MergePatchType, []byte(patch), metav1.PatchOptions{})
			c.note("tick", err)
		}
	})
	return func() {
		close(done)
		wg.Wait()
	}
}

// stopLinger stops releasing lingering pods.
func (c *truthChurn) stopLinger() {
	c.lingerStop.Do(func() { close(c.lingerDone) })
	c.lingerWG.Wait()
}

func (c *truthChurn) intN(n int) int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.rng.IntN(n)
}

func (c *truthChurn) note(op string, err error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	switch {
	case err == nil:
		c.ops[op]++
	case apierrors.IsNotFound(err), apierrors.IsAlreadyExists(err), apierrors.IsConflict(err), errors.Is(err, context.Canceled):
		c.ops[op+" (raced)"]++
	default:
		c.errs = append(c.errs, fmt.Errorf("%s: %w", op, err))
	}
}

func (c *truthChurn) counts() map[string]int {
	c.mu.Lock()
	defer c.mu.Unlock()
	out := map[string]int{}
	for k, v := range c.ops {
		out[k] = v
	}
	return out
}

func (c *truthChurn) errors() []error {
	c.mu.Lock()
	defer c.mu.Unlock()
	return append([]error(nil), c.errs...)
}

func truthPodSpec(grace int64, graceful bool) corev1.PodSpec {
	spec := corev1.PodSpec{
		Containers:                    []corev1.Container{{Name: "app", Image: framework.PauseImage}},
		TerminationGracePeriodSeconds: &grace,
	}
	framework.OnTruthNodes(&spec, graceful)
	return spec
}

// setUp creates the Deployments (at zero replicas) and the hostNetwork pod.
func (c *truthChurn) setUp(ctx context.Context) error {
	for _, d := range truthDeployments {
		labels := map[string]string{"app": d.name}
		dep := &appsv1.Deployment{
			ObjectMeta: metav1.ObjectMeta{Name: d.name, Namespace: c.ns},
			Spec: appsv1.DeploymentSpec{
				Replicas: ptr.To[int32](int32(1 + c.intN(d.max))),
				Selector: &metav1.LabelSelector{MatchLabels: labels},
				Template: corev1.PodTemplateSpec{ObjectMeta: metav1.ObjectMeta{Labels: labels}, Spec: truthPodSpec(d.grace, d.graceful)},
			},
		}
		lingering(&dep.Spec.Template.ObjectMeta, d.linger)
		if _, err := c.kube.AppsV1().Deployments(c.ns).Create(ctx, dep, metav1.CreateOptions{}); err != nil {
			return err
		}
	}
	hn := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "host-agent", Namespace: c.ns}, Spec: truthPodSpec(1, false)}
	hn.Spec.HostNetwork = true
	hn.Spec.NodeName = framework.TruthNodes()[0].Name
	_, err := c.kube.CoreV1().Pods(c.ns).Create(ctx, hn, metav1.CreateOptions{})
	return err
}

// start runs the churn until stop: one operation every 200-600 ms.
func (c *truthChurn) start() {
	c.wg.Go(func() {
		ctx, cancel := context.WithCancel(context.Background())
		defer cancel()
		go func() {
			<-c.done
			cancel()
		}()
		for {
			select {
			case <-c.done:
				return
			case <-time.After(time.Duration(200+c.intN(400)) * time.Millisecond):
			}
			c.step(ctx)
		}
	})
}

// stop ends the churn and waits for the operations in flight.
func (c *truthChurn) stop() {
	c.halts.Do(func() { close(c.done) })
	c.wg.Wait()
}

// step runs one operation drawn at random.
func (c *truthChurn) step(ctx context.Context) {
	switch k := c.intN(100); {
	case k < 35:
		d := truthDeployments[c.intN(len(truthDeployments))]
		patch := fmt.Sprintf(`{"spec":{"replicas":%d}}`, c.intN(d.max+1))
		_, err := c.kube.AppsV1().Deployments(c.ns).Patch(ctx, d.name, types.MergePatchType, []byte(patch), metav1.PatchOptions{})
		c.note("scale "+d.name, err)
	case k < 48:
		c.job(ctx)
	case k < 63:
		c.createBare(ctx)
	case k < 73:
		c.deleteBare(ctx, c.intN(2) == 0)
	case k < 85:
		name := c.reserve()
		if name == "" {
			return
		}
		force := c.intN(2) == 0
		c.wg.Go(func() { c.recreate(ctx, name, force) })
	default:
		c.deleteDeploymentPod(ctx, c.intN(3) == 0)
	}
}

// job creates a Job of one to three pods, deleted (with its pods) as soon
// as it completes: kwok frees a finished pod's address only when the pod
// is deleted.
func (c *truthChurn) job(ctx context.Context) {
	c.mu.Lock()
	c.jobs++
	name := fmt.Sprintf("job-%d", c.jobs)
	completions, parallelism := int32(1+c.rng.IntN(3)), int32(1+c.rng.IntN(2))
	c.mu.Unlock()
	spec := truthPodSpec(1, false)
	spec.RestartPolicy = corev1.RestartPolicyNever
	job := &batchv1.Job{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: c.ns},
		Spec: batchv1.JobSpec{
			Completions: &completions, Parallelism: &parallelism, BackoffLimit: ptr.To[int32](0),
			TTLSecondsAfterFinished: ptr.To[int32](0),
			Template:                corev1.PodTemplateSpec{Spec: spec},
		},
	}
	_, err := c.kube.BatchV1().Jobs(c.ns).Create(ctx, job, metav1.CreateOptions{})
	c.note("job", err)
}

// reserve picks a bare pod name no other operation holds, or "".
func (c *truthChurn) reserve() string {
	c.mu.Lock()
	defer c.mu.Unlock()
	var free []string
	for _, n := range truthBarePods {
		if !c.busy[n] {
			free = append(free, n)
		}
	}
	if len(free) == 0 {
		return ""
	}
	n := free[c.rng.IntN(len(free))]
	c.busy[n] = true
	return n
}

func (c *truthChurn) release(name string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	delete(c.busy, name)
}

// barePod is a pod of no workload: a grace period of 1, 3 or 6 s, a
// third of them lingering up to 1-5 s, and either placed by the scheduler
// (on the graceful node one time in four) or bound to a node by name.
func (c *truthChurn) barePod(name string) *corev1.Pod {
	graces := []int64{1, 3, 6}
	pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: c.ns, Labels: map[string]string{"bare": "true"}},
		Spec: truthPodSpec(graces[c.intN(len(graces))], c.intN(4) == 0)}
	if c.intN(3) == 0 {
		lingering(&pod.ObjectMeta, time.Duration(1+c.intN(5))*time.Second)
	}
	if c.intN(3) == 0 {
		nodes := framework.TruthNodes()
		pod.Spec.NodeName = nodes[c.intN(len(nodes))].Name
	}
	return pod
}

func (c *truthChurn) createBare(ctx context.Context) {
	name := c.reserve()
	if name == "" {
		return
	}
	defer c.release(name)
	_, err := c.kube.CoreV1().Pods(c.ns).Create(ctx, c.barePod(name), metav1.CreateOptions{})
	c.note("create pod", err)
}

func (c *truthChurn) deleteBare(ctx context.Context, force bool) {
	name := c.reserve()
	if name == "" {
		return
	}
	defer c.release(name)
	c.note(deleteOp("delete pod", force), c.deletePod(ctx, name, force))
}

func deleteOp(op string, force bool) string {
	if force {
		return op + " (grace 0)"
	}
	return op + " (graceful)"
}

func (c *truthChurn) deletePod(ctx context.Context, name string, force bool) error {
	opts := metav1.DeleteOptions{}
	if force {
		zero := int64(0)
		opts.GracePeriodSeconds = &zero
	}
	return c.kube.CoreV1().Pods(c.ns).Delete(ctx, name, opts)
}

// recreate deletes a bare pod, waits until it is gone, and creates a pod of
// the same name (a new UID, often a new node and address).
func (c *truthChurn) recreate(ctx context.Context, name string, force bool) {
	defer c.release(name)
	old, err := c.kube.CoreV1().Pods(c.ns).Get(ctx, name, metav1.GetOptions{})
	if err != nil {
		c.note("recreate pod", err)
		return
	}
	if err := c.deletePod(ctx, name, force); err != nil {
		c.note("recreate pod", err)
		return
	}
	err = wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, 30*time.Second, true, func(ctx context.Context) (bool, error) {
		p, err := c.kube.CoreV1().Pods(c.ns).Get(ctx, name, metav1.GetOptions{})
		return apierrors.IsNotFound(err) || err == nil && p.UID != old.UID, nil
	})
	if err != nil {
		c.note("recreate pod", fmt.Errorf("%s was not gone 30 s after its deletion: %w", name, err))
		return
	}
	_, err = c.kube.CoreV1().Pods(c.ns).Create(ctx, c.barePod(name), metav1.CreateOptions{})
	c.note(deleteOp("recreate pod", force), err)
}

// deleteDeploymentPod deletes a running pod of a Deployment; its
// ReplicaSet replaces it.
func (c *truthChurn) deleteDeploymentPod(ctx context.Context, force bool) {
	list, err := c.kube.CoreV1().Pods(c.ns).List(ctx, metav1.ListOptions{LabelSelector: "app"})
	if err != nil {
		c.note("delete deployment pod", err)
		return
	}
	var live []string
	for _, p := range list.Items {
		if p.DeletionTimestamp == nil {
			live = append(live, p.Name)
		}
	}
	if len(live) == 0 {
		return
	}
	sort.Strings(live)
	c.note(deleteOp("delete deployment pod", force), c.deletePod(ctx, live[c.intN(len(live))], force))
}

// gracefulKubelet is the test's kubelet of the graceful node.
func (r *truthRun) gracefulKubelet() *framework.TruthKubelet {
	if len(r.kubelets) == 0 {
		r.t.Fatal("no kubelet of the test's own: the truth's graceful node is missing")
	}
	return r.kubelets[0]
}

// startPodOn creates a pod of the given grace period bound to the graceful
// node, and waits until it has its addresses, which it returns.
func (r *truthRun) startPodOn(name string, grace int64) []string {
	t := r.t
	spec := truthPodSpec(grace, true)
	for _, n := range framework.TruthNodes() {
		if n.Graceful {
			spec.NodeName = n.Name
		}
	}
	pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: r.ns}, Spec: spec}
	if _, err := r.c.Kube.CoreV1().Pods(r.ns).Create(t.Context(), pod, metav1.CreateOptions{}); err != nil {
		t.Fatalf("creating pod %s: %v", name, err)
	}
	var ips []string
	err := wait.PollUntilContextTimeout(t.Context(), 50*time.Millisecond, 30*time.Second, true, func(ctx context.Context) (bool, error) {
		r.supervise()
		p, err := r.c.Kube.CoreV1().Pods(r.ns).Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			return false, nil
		}
		ips = ips[:0]
		for _, ip := range p.Status.PodIPs {
			ips = append(ips, ip.IP)
		}
		return len(ips) > 0, nil
	})
	if err != nil {
		t.Fatalf("pod %s got no address within 30 s: %v", name, err)
	}
	return ips
}

// clockShifts compares, for the holds whose start the truth places in a
// stretch led by a replica with its clock off and for all the others, the
// latest start the IPHistory records (startedBefore, else from) with the
// end of the truth's band of it: a clock off by d shifts the first by
// about d. It returns the medians and
// the counts, to show that the offset took effect.
func (r *truthRun) clockShifts(ctx context.Context) (skewed, others time.Duration, nSkewed, nOthers int) {
	var in, out []time.Duration
	for _, addr := range r.truth.Addresses() {
		h, err := r.sim.GetHistory(ctx, framework.HistoryName(addr))
		if err != nil || h == nil {
			continue
		}
		for _, th := range r.truth.Holds(addr) {
			for _, hh := range h.Holders {
				if hh.PodUID != th.UID || th.FromBand.IsZero() {
					continue
				}
				// The latest the start can be: when the replica saw it.
				seen := hh.From.Time
				if hh.StartedBefore != nil {
					seen = hh.StartedBefore.Time
				}
				if d := seen.Sub(th.FromBand.Hi); d > -5*time.Second && d < 5*time.Second {
					if _, ok := framework.WindowAt(r.skewed, th.FromBand.Hi); ok {
						in = append(in, d)
					} else {
						out = append(out, d)
					}
				}
				break
			}
		}
	}
	median := func(ds []time.Duration) time.Duration {
		if len(ds) == 0 {
			return 0
		}
		slices.Sort(ds)
		return ds[len(ds)/2]
	}
	return median(in), median(out), len(in), len(out)
}
