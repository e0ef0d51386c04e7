package synth

import (
	"errors"
	"fmt"
	"math"
	"slices"
	"strconv"
	"strings"

	"github.com/fragsim/fragsim/trace"
)

// AgentKind says what an agent does with its model.
type AgentKind uint8

// The agent kinds.
const (
	// Encode agents run inference forward passes of an encoder (BERT-like):
	// one request is one forward pass; its outputs are held for a while.
	Encode AgentKind = iota
	// Decode agents generate text with a decoder (GPT-2-like): a prompt
	// forward pass, then one step per token, each growing the KV cache of
	// every layer by concatenation (a new tensor one token longer, then the
	// old one freed, as torch.cat does).
	Decode
	// Train agents run training steps of an encoder: activations kept until
	// backward, gradients, AdamW state.
	Train
)

var agentKindNames = [...]string{"encode", "decode", "train"}

// String returns the kind's name.
func (k AgentKind) String() string {
	if int(k) < len(agentKindNames) {
		return agentKindNames[k]
	}
	return "kind(" + strconv.Itoa(int(k)) + ")"
}

// ParseAgentKind returns the AgentKind whose String is name.
func ParseAgentKind(name string) (AgentKind, error) {
	for i, n := range agentKindNames {
		if n == name {
			return AgentKind(i), nil
		}
	}
	return 0, fmt.Errorf("unknown agent kind %q (want encode, decode or train)", name)
}

// ModelShape is the architecture of a transformer model: enough to know the
// size of every parameter and activation.
type ModelShape struct {
	Name         string
	Layers       int
	Hidden       int
	Heads        int
	Intermediate int
	Vocab        int
	MaxPositions int
	TypeVocab    int // token-type embeddings (BERT); 0 for none
	DTypeBytes   int // bytes per element of weights and activations
}

// BERTBase returns the shape of BERT-base (110M parameters, fp32).
func BERTBase() ModelShape {
	return ModelShape{Name: "bert-base", Layers: 12, Hidden: 768, Heads: 12, Intermediate: 3072,
		Vocab: 30522, MaxPositions: 512, TypeVocab: 2, DTypeBytes: 4}
}

// GPT2Small returns the shape of GPT-2 small (124M parameters, fp32).
func GPT2Small() ModelShape {
	return ModelShape{Name: "gpt2", Layers: 12, Hidden: 768, Heads: 12, Intermediate: 3072,
		Vocab: 50257, MaxPositions: 1024, DTypeBytes: 4}
}

// The largest model dimensions Validate accepts: far above any real
// transformer's, and low enough that the products the generator forms
// (a layer's weights, an activation) stay far from overflowing.
const (
	MaxLayers    = 1 << 10
	MaxHidden    = 1 << 16
	MaxVocab     = 1 << 22
	MaxPositions = 1 << 20
)

// MaxAgents bounds Config.Agents: each agent holds its own model copy
// (BERT-base is 440 MB), so a few thousand already need more memory than
// any device has, and the generator keeps a few hundred tensors an agent.
const MaxAgents = 1 << 12

func (m ModelShape) validate(what string) error {
	switch {
	case m.Layers <= 0 || m.Hidden <= 0 || m.Heads <= 0 || m.Intermediate <= 0 || m.Vocab <= 0 || m.MaxPositions <= 0:
		return fmt.Errorf("%s model %q: layers, hidden, heads, intermediate, vocab and max positions must be positive", what, m.Name)
	case m.Layers > MaxLayers || m.Hidden > MaxHidden || m.Heads > m.Hidden || m.Intermediate > 4*MaxHidden ||
		m.Vocab > MaxVocab || m.MaxPositions > MaxPositions || m.TypeVocab > MaxHidden:
		return fmt.Errorf("%s model %q: layers %d, hidden %d, heads %d, intermediate %d, vocab %d, max positions %d, type vocab %d: "+
			"want at most %d layers, %d hidden, heads at most hidden, %d intermediate, %d vocab, %d positions and %d type vocab",
			what, m.Name, m.Layers, m.Hidden, m.Heads, m.Intermediate, m.Vocab, m.MaxPositions, m.TypeVocab,
			MaxLayers, MaxHidden, 4*MaxHidden, MaxVocab, MaxPositions, MaxHidden)
	case m.Hidden%m.Heads != 0:
		return fmt.Errorf("%s model %q: hidden size %d is not a multiple of %d heads", what, m.Name, m.Hidden, m.Heads)
	case m.DTypeBytes != 1 && m.DTypeBytes != 2 && m.DTypeBytes != 4 && m.DTypeBytes != 8:
		return fmt.Errorf("%s model %q: dtype bytes %d (want 1, 2, 4 or 8)", what, m.Name, m.DTypeBytes)
	case m.TypeVocab < 0:
		return fmt.Errorf("%s model %q: negative type vocabulary", what, m.Name)
	}
	return nil
}

// Config is a workload model. The zero value is not valid: start from
// DefaultConfig.
type Config struct {
	// Seed seeds the random generator (PCG): the same seed and config give
	// the same events.
	Seed uint64
	// Events is the target length of the trace. Generation stops at the
	// first step boundary at or after it, then frees every request's
	// tensors, so a trace is a little longer than Events.
	Events int64

	// Agents is the number of agents, each with its own copy of its model.
	Agents int
	// Kinds are the agents' kinds: agent i is Kinds[i%len(Kinds)].
	Kinds []AgentKind
	// Encoder is the model of Encode and Train agents; Decoder that of
	// Decode agents.
	Encoder, Decoder ModelShape

	// BatchSizes is the request batch-size mix; BatchWeights their relative
	// frequencies (nil: equally likely).
	BatchSizes   []int
	BatchWeights []float64
	// SeqMin and SeqMax bound the sequence length of encoder requests (and
	// decoder prompts), drawn uniformly, or log-uniformly when SeqLog is set.
	SeqMin, SeqMax int
	SeqLog         bool

	// FreeProb and HoldCap say how long requests' outputs stay live: after
	// every step, while outputs are held, one of them chosen at random is
	// freed with probability FreeProb, and always while more than HoldCap
	// are held.
	FreeProb float64
	HoldCap  int

	// EagerAttention materialises the attention scores (batch*heads*seq*seq)
	// as eager attention does; when false, attention is one fused kernel
	// (scaled_dot_product_attention) and the encoder builds a 4-D mask
	// (batch*seq*seq) once per forward pass instead.
	EagerAttention bool

	// DecodeMin and DecodeMax bound the tokens a decode request generates.
	DecodeMin, DecodeMax int

	// ThinkNS is the mean idle time between steps (exponential).
	ThinkNS int64
	// OpNS is the host time to launch one operator (jittered ±25%).
	OpNS int64
	// FLOPS and MemBW are the device's throughput (flop/s, bytes/s): kernel
	// times follow from them. Event times are host times: the host runs
	// ahead of the device and waits for it at synchronising points.
	FLOPS, MemBW float64

	// Stacks attaches a short synthetic call stack (operator, module) to
	// each allocation.
	Stacks bool
	// StreamPerAgent runs each agent on its own stream instead of the
	// default stream.
	StreamPerAgent bool
}

// DefaultConfig returns the default workload: five agents, each with its own
// BERT-base, serving forward passes of batch 1, 4 or 8 and 16 to 384 tokens,
// with outputs held for a few steps. Its distributions are calibrated on a
// real trace (see the package documentation).
func DefaultConfig() Config {
	return Config{
		Seed:           1,
		Events:         1_000_000,
		Agents:         5,
		Kinds:          []AgentKind{Encode},
		Encoder:        BERTBase(),
		Decoder:        GPT2Small(),
		BatchSizes:     []int{1, 4, 8},
		SeqMin:         16,
		SeqMax:         384,
		SeqLog:         false,
		FreeProb:       0.45,
		HoldCap:        10,
		EagerAttention: false,
		DecodeMin:      16,
		DecodeMax:      256,
		ThinkNS:        0,
		OpNS:           34_000,
		FLOPS:          30e12,
		MemBW:          4e12,
		Stacks:         true,
	}
}

// Validate reports the first problem with c.
func (c *Config) Validate() error {
	switch {
	case c.Events <= 0:
		return fmt.Errorf("events must be positive, got %d", c.Events)
	case c.Agents <= 0 || c.Agents > MaxAgents:
		return fmt.Errorf("agents %d: want 1 to %d (each agent holds its own model copy)", c.Agents, MaxAgents)
	case c.Events > MaxEvents:
		return fmt.Errorf("events %d: want at most %d", c.Events, int64(MaxEvents))
	case len(c.Kinds) == 0:
		return errors.New("no agent kinds")
	case len(c.BatchSizes) == 0:
		return errors.New("no batch sizes")
	case c.BatchWeights != nil && len(c.BatchWeights) != len(c.BatchSizes):
		return fmt.Errorf("%d batch weights for %d batch sizes", len(c.BatchWeights), len(c.BatchSizes))
	case c.SeqMin <= 0 || c.SeqMax < c.SeqMin || c.SeqMax > MaxPositions:
		return fmt.Errorf("sequence lengths %d..%d: want 0 < min <= max", c.SeqMin, c.SeqMax)
	case !(c.FreeProb >= 0 && c.FreeProb < 1):
		return fmt.Errorf("free probability %v: want 0 <= p < 1", c.FreeProb)
	case c.DecodeMin < 0 || c.DecodeMax > MaxPositions:
		return fmt.Errorf("decode tokens %d..%d: want 0 to %d", c.DecodeMin, c.DecodeMax, MaxPositions)
	case c.HoldCap < 0 || c.HoldCap > 1<<20:
		return fmt.Errorf("hold cap %d out of range 0..%d", c.HoldCap, 1<<20)
	case c.ThinkNS < 0 || c.OpNS < 0:
		return errors.New("negative think or operator time")
	case !(c.FLOPS > 0) || !(c.MemBW > 0) || math.IsInf(c.FLOPS, 0) || math.IsInf(c.MemBW, 0):
		return errors.New("device flop/s and bandwidth must be positive finite numbers")
	}
	total := 0.0
	for i, b := range c.BatchSizes {
		if b <= 0 || b > 1<<16 {
			return fmt.Errorf("batch size %d out of range 1..65536", b)
		}
		if c.BatchWeights != nil {
			w := c.BatchWeights[i]
			if !(w >= 0) || math.IsInf(w, 0) {
				return fmt.Errorf("batch weight %v is not a non-negative finite number", w)
			}
			total += w
		}
	}
	if c.BatchWeights != nil && !(total > 0) {
		return errors.New("batch weights sum to zero")
	}
	var enc, dec, train bool
	for _, k := range c.Kinds {
		switch k {
		case Encode:
			enc = true
		case Decode:
			dec = true
		case Train:
			train = true
		default:
			return fmt.Errorf("unknown agent kind %d", k)
		}
	}
	if enc || train {
		if err := c.Encoder.validate("encoder"); err != nil {
			return err
		}
		if c.SeqMax > c.Encoder.MaxPositions {
			return fmt.Errorf("sequence length max %d is over the encoder's %d positions", c.SeqMax, c.Encoder.MaxPositions)
		}
	}
	if dec {
		if err := c.Decoder.validate("decoder"); err != nil {
			return err
		}
		if c.DecodeMin <= 0 || c.DecodeMax < c.DecodeMin {
			return fmt.Errorf("decode tokens %d..%d: want 0 < min <= max", c.DecodeMin, c.DecodeMax)
		}
		if c.SeqMax+c.DecodeMax > c.Decoder.MaxPositions {
			return fmt.Errorf("prompt max %d plus decode max %d is over the decoder's %d positions",
				c.SeqMax, c.DecodeMax, c.Decoder.MaxPositions)
		}
	}
	return c.checkBytes()
}

// checkBytes refuses a workload whose memory no trace can hold: every
// agent's weights together, or one activation, past trace.MaxSizeBytes.
// The figures are upper bounds, in float64 so that they cannot wrap.
func (c *Config) checkBytes() error {
	var weights, act float64
	maxBatch := float64(slices.Max(c.BatchSizes))
	for i, k := range c.Kinds {
		if i >= c.Agents {
			break
		}
		m := &c.Encoder
		seq := float64(c.SeqMax)
		widest := float64(max(m.Intermediate, 3*m.Hidden, numLabels))
		if k == Decode {
			m = &c.Decoder
			seq = float64(c.SeqMax + c.DecodeMax)
			widest = float64(max(m.Intermediate, 3*m.Hidden, m.Vocab))
		}
		var w float64
		params(m, k, func(elems, _ int, _ bool) { w += float64(elems) * float64(max(m.DTypeBytes, 4)) })
		// Agents i, i+len(Kinds), ... have this kind.
		weights += w * float64((c.Agents-i+len(c.Kinds)-1)/len(c.Kinds))
		f := float64(max(m.DTypeBytes, int64Bytes))
		scores := maxBatch * seq * seq * f // the mask, or the scores of every head
		if c.EagerAttention {
			scores *= float64(m.Heads)
		}
		act = max(act, maxBatch*seq*widest*f, scores)
	}
	if weights > trace.MaxSizeBytes {
		return fmt.Errorf("%d agents' model copies need %.3g bytes, above the most a trace holds (2^48): use fewer agents or a smaller model",
			c.Agents, weights)
	}
	if act > trace.MaxSizeBytes {
		return fmt.Errorf("an activation of batch %d and %d tokens may need %.3g bytes, above the most a trace holds (2^48): use smaller batches or shorter sequences",
			int(maxBatch), c.SeqMax, act)
	}
	return nil
}

// MaxEvents bounds Config.Events (2^40).
const MaxEvents = 1 << 40

// Summary returns the config as one line of key=value pairs (stored in the
// trace header).
func (c *Config) Summary() string {
	var b strings.Builder
	kinds := make([]string, len(c.Kinds))
	for i, k := range c.Kinds {
		kinds[i] = k.String()
	}
	fmt.Fprintf(&b, "events=%d agents=%d kinds=%s batch=%s", c.Events, c.Agents, strings.Join(kinds, ","), joinInts(c.BatchSizes))
	if c.BatchWeights != nil {
		ws := make([]string, len(c.BatchWeights))
		for i, w := range c.BatchWeights {
			ws[i] = strconv.FormatFloat(w, 'g', -1, 64)
		}
		fmt.Fprintf(&b, " batch_weights=%s", strings.Join(ws, ","))
	}
	dist := "uniform"
	if c.SeqLog {
		dist = "log"
	}
	fmt.Fprintf(&b, " seq=%d..%d/%s free_prob=%g hold_cap=%d eager_attention=%t", c.SeqMin, c.SeqMax, dist, c.FreeProb, c.HoldCap, c.EagerAttention)
	fmt.Fprintf(&b, " encoder=%s decoder=%s decode=%d..%d", c.Encoder.summary(), c.Decoder.summary(), c.DecodeMin, c.DecodeMax)
	fmt.Fprintf(&b, " think_ns=%d op_ns=%d flops=%g membw=%g stacks=%t stream_per_agent=%t",
		c.ThinkNS, c.OpNS, c.FLOPS, c.MemBW, c.Stacks, c.StreamPerAgent)
	return b.String()
}

func (m ModelShape) summary() string {
	return fmt.Sprintf("%s(L%d,H%d,A%d,I%d,V%d,P%d,T%d,%dB)", m.Name, m.Layers, m.Hidden, m.Heads,
		m.Intermediate, m.Vocab, m.MaxPositions, m.TypeVocab, m.DTypeBytes)
}

func joinInts(xs []int) string {
	s := make([]string, len(xs))
	for i, x := range xs {
		s[i] = strconv.Itoa(x)
	}
	return strings.Join(s, ",")
}

// Header returns the trace header for a trace generated with c.
func (c *Config) Header() *trace.Header {
	return &trace.Header{
		Producer:        trace.ProducerSynthetic,
		ProducerVersion: "fragsim synth 1",
		Tags: map[string]string{
			"seed":     strconv.FormatUint(c.Seed, 10),
			"synth":    c.Summary(),
			"workload": "synthetic multi-agent",
		},
	}
}
