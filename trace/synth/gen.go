package synth

import (
	"math"
	"math/rand/v2"
	"strconv"

	"github.com/fragsim/fragsim/trace"
)

// Stats summarises a generated trace.
type Stats struct {
	Events   int64 // events written
	Allocs   int64
	Frees    int64 // free_requested events (each followed by its free_completed)
	Markers  int64
	Steps    int64 // scheduled steps: forward passes, decode tokens, training steps
	Requests int64 // requests started (a decode request spans many steps)

	PeakLiveBytes  uint64 // most bytes requested and not yet freed at once
	PeakLiveBlocks int64  // most blocks live at once
	FinalLiveBytes uint64 // bytes still live at the end of the trace
	// PersistentBytes is what the workload keeps for its whole life: model
	// weights, cuBLAS workspaces, and the optimizer state of training agents.
	PersistentBytes uint64
	WeightBytes     uint64 // model weights (and buffers) alone
	WorkspaceBytes  uint64 // cuBLAS workspaces alone

	DurationNS int64 // time of the last event minus that of the first
}

// tensor is a live block the generator made.
type tensor struct {
	addr, size uint64
}

type agent struct {
	id      int
	kind    AgentKind
	model   *ModelShape
	modelIx int // index into gen.sites
	name    trace.StringID
	stream  trace.StreamID
	weights []tensor

	// decode request state
	busy    bool
	batch   int
	length  int // tokens in the KV cache
	left    int // tokens still to generate
	kv      []kvCache
	nextIDs tensor // the last token, input of the next step

	// training state
	optState              []tensor
	params                []int // parameter element counts, in order
	layers                []trainLayer
	trainIDs, trainLabels tensor // the loop's inputs, until the next step
}

// kvCache is one layer's cache: keys and values.
type kvCache struct {
	k, v tensor
}

const (
	addrBase   = 0x7f00_0000_0000
	maxAheadNS = 20_000_000 // how far the host may run ahead of the device

	// cuBLAS workspaces PyTorch allocates per stream (Hopper sizes).
	cublasWorkspaceBytes   = 32 << 20
	cublasLtWorkspaceBytes = 1 << 20
)

// gen is the generator's state: everything it holds is bounded by the live
// set, never by the number of events.
type gen struct {
	sink trace.Sink
	cfg  *Config
	rng  *rand.Rand
	st   Stats
	err  error

	cpu, gpu int64 // host and device clocks (ns)
	first    int64
	last     int64
	started  bool

	live       uint64
	liveBlocks int64
	slots      map[uint64]int // rounded size -> index in free
	free       [][]uint64     // addresses of freed blocks of one rounded size
	next       uint64         // next fresh address

	agents  []*agent
	current int // agent of the last step, -1 before the first
	held    []tensor
	grads   []tensor // training: parameter gradients until zero_grad
	scratch []tensor
	wsDone  []bool // cuBLAS workspaces allocated, per stream
	bwdWS   bool   // autograd thread's cuBLAS workspace allocated

	stepText [3]trace.StringID
	sites    [2][]trace.StackID // [encoder, decoder][site] -> stack, lazily
	siteNum  [2]int
	models   [2]*ModelShape
}

// Generate streams the events of the workload cfg describes into sink and
// returns what it wrote. Its memory is bounded by the workload's live set,
// not by cfg.Events. It stops at the first error of sink.
func Generate(sink trace.Sink, cfg Config) (*Stats, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	g := &gen{
		sink:    sink,
		cfg:     &cfg,
		rng:     rand.New(rand.NewPCG(cfg.Seed, cfg.Seed^0x9e3779b97f4a7c15)),
		slots:   make(map[uint64]int),
		next:    addrBase,
		current: -1,
	}
	g.models = [2]*ModelShape{&cfg.Encoder, &cfg.Decoder}
	for i, m := range g.models {
		g.siteNum[i] = (m.Layers + 2) * int(numOps)
	}
	for i, name := range [...]string{"forward", "generate", "train_step"} {
		g.stepText[i] = sink.String(name)
	}
	g.run()
	if g.err != nil {
		return &g.st, g.err
	}
	g.st.FinalLiveBytes = g.live
	if g.started {
		g.st.DurationNS = g.last - g.first
	}
	return &g.st, nil
}

func (g *gen) run() {
	cfg := g.cfg
	for i := range cfg.Agents {
		a := &agent{id: i, kind: cfg.Kinds[i%len(cfg.Kinds)]}
		a.model = &cfg.Encoder
		if a.kind == Decode {
			a.model, a.modelIx = &cfg.Decoder, 1
		}
		a.name = g.sink.String("agent-" + strconv.Itoa(i))
		if cfg.StreamPerAgent {
			a.stream = trace.StreamID(0x5555_0000_0000 + uint64(i)*0x10_0000)
		}
		g.agents = append(g.agents, a)
	}
	// Model construction: every agent moves its model to the device.
	for _, a := range g.agents {
		g.switchTo(a)
		g.marker(trace.MarkerModel, g.sink.String(a.model.Name), 0)
		g.loadWeights(a)
		g.sync()
	}
	g.st.WeightBytes = g.live
	g.st.PersistentBytes = g.live
	for g.err == nil && g.st.Events < cfg.Events {
		g.idle()
		a := g.agents[g.rng.IntN(len(g.agents))]
		g.switchTo(a)
		g.st.Steps++
		switch a.kind {
		case Encode:
			g.encodeRequest(a)
		case Decode:
			g.decodeStep(a)
		case Train:
			g.trainStep(a)
		}
		g.releaseHeld()
	}
	// Drain: end the requests in flight and drop every held output.
	for _, a := range g.agents {
		if a.busy {
			g.switchTo(a)
			g.endDecode(a)
		}
		if a.trainIDs.size != 0 {
			g.switchTo(a)
			g.freeT(a.trainIDs)
			g.freeT(a.trainLabels)
			a.trainIDs, a.trainLabels = tensor{}, tensor{}
		}
	}
	for _, t := range g.held {
		g.freeT(t)
	}
	g.held = g.held[:0]
}

// ---- events ----

func (g *gen) emit(e trace.Event) {
	if g.err != nil {
		return
	}
	e.TimeNS = g.cpu
	g.last = g.cpu
	if !g.started {
		g.started, g.first = true, g.cpu
	}
	g.err = g.sink.WriteEvent(e)
	g.st.Events++
}

func (g *gen) marker(m trace.MarkerKind, text trace.StringID, aux uint64) {
	g.emit(trace.Event{Kind: trace.KindMarker, Marker: m, Text: text, Aux: aux, Stream: g.stream()})
	g.st.Markers++
}

func (g *gen) stream() trace.StreamID {
	if g.current < 0 {
		return trace.DefaultStream
	}
	return g.agents[g.current].stream
}

func (g *gen) switchTo(a *agent) {
	if g.current == a.id {
		return
	}
	g.current = a.id
	g.marker(trace.MarkerAgent, a.name, 0)
}

// alloc emits the allocation of size bytes by operator o of layer (-1 for
// none) of the current agent's model.
func (g *gen) alloc(size uint64, o op, layer int) tensor {
	if size == 0 {
		size = 1
	}
	r := (size + 511) &^ 511
	var addr uint64
	if i, ok := g.slots[r]; ok && len(g.free[i]) > 0 {
		s := g.free[i]
		addr = s[len(s)-1]
		g.free[i] = s[:len(s)-1]
	} else {
		addr = g.next
		g.next += r
	}
	var stack trace.StackID
	if g.cfg.Stacks {
		stack = g.stack(o, layer)
	}
	g.emit(trace.Event{Kind: trace.KindAlloc, Addr: addr, SizeBytes: size, Stream: g.stream(), Stack: stack})
	g.st.Allocs++
	g.live += size
	g.liveBlocks++
	g.st.PeakLiveBytes = max(g.st.PeakLiveBytes, g.live)
	g.st.PeakLiveBlocks = max(g.st.PeakLiveBlocks, g.liveBlocks)
	return tensor{addr: addr, size: size}
}

// freeT emits the free of t: requested and, with no other stream to wait
// for, completed at once.
func (g *gen) freeT(t tensor) {
	if t.size == 0 {
		return // absent tensor
	}
	s := g.stream()
	g.emit(trace.Event{Kind: trace.KindFreeRequested, Addr: t.addr, SizeBytes: t.size, Stream: s})
	g.emit(trace.Event{Kind: trace.KindFreeCompleted, Addr: t.addr, SizeBytes: t.size, Stream: s})
	g.st.Frees++
	g.live -= t.size
	g.liveBlocks--
	r := (t.size + 511) &^ 511
	i, ok := g.slots[r]
	if !ok {
		i = len(g.free)
		g.slots[r] = i
		g.free = append(g.free, nil)
	}
	g.free[i] = append(g.free[i], t.addr)
}

func (g *gen) stack(o op, layer int) trace.StackID {
	mi := g.agents[g.current].modelIx
	tab := g.sites[mi]
	if tab == nil {
		tab = make([]trace.StackID, g.siteNum[mi])
		g.sites[mi] = tab
	}
	ix := (layer+1)*int(numOps) + int(o)
	if ix < 0 || ix >= len(tab) {
		panic("synth: site out of range")
	}
	if tab[ix] == trace.NoStack {
		m := g.models[mi]
		module := m.Name
		if layer >= 0 {
			module += ".layer." + strconv.Itoa(layer)
		}
		file := g.sink.String(m.Name + ".py")
		tab[ix] = g.sink.Stack([]trace.Frame{
			{Func: g.sink.String(opNames[o]), File: g.sink.String("torch/_ops.py")},
			{Func: g.sink.String(module + ".forward"), File: file, Line: uint32(layer + 1)},
		})
	}
	return tab[ix]
}

// ---- time ----

// op advances the clocks by one operator launch doing flops of arithmetic
// over bytes of memory traffic.
func (g *gen) op(flops, bytes float64) {
	host := float64(g.cfg.OpNS) * (0.75 + 0.5*g.rng.Float64())
	g.cpu += int64(host)
	kernel := max(flops/g.cfg.FLOPS, bytes/g.cfg.MemBW) * 1e9
	g.gpu = max(g.gpu, g.cpu) + int64(kernel) + 1000
	// The launch queue is bounded: the host cannot run far ahead.
	if g.gpu-g.cpu > maxAheadNS {
		g.cpu = g.gpu - maxAheadNS
	}
}

// sync makes the host wait for the device.
func (g *gen) sync() { g.cpu = max(g.cpu, g.gpu) }

// idle is the time between two steps.
func (g *gen) idle() {
	if g.cfg.ThinkNS > 0 {
		g.cpu += int64(g.rng.ExpFloat64() * float64(g.cfg.ThinkNS))
	}
}

// out runs an elementwise-like operator producing elems elements.
func (g *gen) out(elems int, elemBytes int, o op, layer int) tensor {
	n := float64(elems) * float64(elemBytes)
	g.op(float64(elems), 2*n)
	return g.alloc(uint64(elems)*uint64(elemBytes), o, layer)
}

// matmul runs an operator producing rows*cols elements from inner-long dot
// products.
func (g *gen) matmul(rows, inner, cols, elemBytes int, o op, layer int) tensor {
	g.op(2*float64(rows)*float64(inner)*float64(cols), float64(elemBytes)*(float64(rows)*float64(inner)+float64(inner)*float64(cols)+float64(rows)*float64(cols)))
	t := g.alloc(uint64(rows)*uint64(cols)*uint64(elemBytes), o, layer)
	if o == opLinear || o == opMatmul {
		g.workspace()
	}
	return t
}

// workspace allocates cuBLAS's workspaces the first time a stream runs a
// matrix product: they stay for the life of the process.
func (g *gen) workspace() {
	i := 0
	if g.cfg.StreamPerAgent {
		i = g.current
	}
	if g.wsDone == nil {
		g.wsDone = make([]bool, len(g.agents))
	}
	if g.wsDone[i] {
		return
	}
	g.wsDone[i] = true
	g.alloc(cublasWorkspaceBytes, opMatmul, -1)
	g.alloc(cublasLtWorkspaceBytes, opMatmul, -1)
	g.st.PersistentBytes += cublasWorkspaceBytes + cublasLtWorkspaceBytes
	g.st.WorkspaceBytes += cublasWorkspaceBytes + cublasLtWorkspaceBytes
}

// ---- requests ----

func (g *gen) batch() int {
	c := g.cfg
	if c.BatchWeights == nil {
		return c.BatchSizes[g.rng.IntN(len(c.BatchSizes))]
	}
	total := 0.0
	for _, w := range c.BatchWeights {
		total += w
	}
	x := g.rng.Float64() * total
	for i, w := range c.BatchWeights {
		if x < w {
			return c.BatchSizes[i]
		}
		x -= w
	}
	return c.BatchSizes[len(c.BatchSizes)-1]
}

func (g *gen) seqLen() int {
	c := g.cfg
	if c.SeqLog && c.SeqMax > c.SeqMin {
		lo, hi := math.Log(float64(c.SeqMin)), math.Log(float64(c.SeqMax)+1)
		return min(c.SeqMax, int(math.Exp(lo+(hi-lo)*g.rng.Float64())))
	}
	return c.SeqMin + g.rng.IntN(c.SeqMax-c.SeqMin+1)
}

func (g *gen) hold(t tensor) { g.held = append(g.held, t) }

// releaseHeld frees held outputs at random, as an agent loop that drops each
// with probability FreeProb and never keeps more than HoldCap does.
func (g *gen) releaseHeld() {
	for len(g.held) > 0 && (g.rng.Float64() < g.cfg.FreeProb || len(g.held) > g.cfg.HoldCap) {
		i := g.rng.IntN(len(g.held))
		t := g.held[i]
		copy(g.held[i:], g.held[i+1:])
		g.held = g.held[:len(g.held)-1]
		g.freeT(t)
	}
}
