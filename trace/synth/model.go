package synth

import "github.com/fragsim/fragsim/trace"

// op is the operator that allocates a tensor (it names the synthetic stack).
type op uint8

const (
	opParam op = iota
	opBuffer
	opRandint
	opOnes
	opEq
	opAll
	opRsub
	opMul
	opEmbedding
	opAdd
	opLayerNorm
	opLinear
	opMatmul
	opDiv
	opSoftmax
	opSDPA
	opContiguous
	opGELU
	opTanh
	opPow
	opDropout
	opCat
	opArgmax
	opLogSoftmax
	opNLLLoss
	opGrad
	opZerosLike
	opForeachSqrt
	numOps
)

var opNames = [numOps]string{
	opParam: "aten::_to_copy", opBuffer: "aten::_to_copy", opRandint: "aten::randint",
	opOnes: "aten::ones", opEq: "aten::eq", opAll: "aten::all", opRsub: "aten::rsub", opMul: "aten::mul",
	opEmbedding: "aten::embedding", opAdd: "aten::add", opLayerNorm: "aten::native_layer_norm",
	opLinear: "aten::linear", opMatmul: "aten::matmul", opDiv: "aten::div", opSoftmax: "aten::_softmax",
	opSDPA: "aten::scaled_dot_product_attention", opContiguous: "aten::clone", opGELU: "aten::gelu",
	opTanh: "aten::tanh", opPow: "aten::pow", opDropout: "aten::native_dropout", opCat: "aten::cat",
	opArgmax: "aten::argmax", opLogSoftmax: "aten::_log_softmax", opNLLLoss: "aten::nll_loss_forward",
	opGrad: "autograd::backward", opZerosLike: "aten::zeros_like", opForeachSqrt: "aten::_foreach_sqrt",
}

const (
	int64Bytes = 8
	numLabels  = 4 // classification head of training agents
)

// params calls f with the element count of every parameter and buffer of
// a model of kind k, in the order Module.cuda() moves them, with the layer
// they belong to (-1 for none).
func params(m *ModelShape, k AgentKind, f func(elems int, layer int, buffer bool)) {
	H, I, V, P := m.Hidden, m.Intermediate, m.Vocab, m.MaxPositions
	if k == Decode { // GPT-2
		f(V*H, -1, false)
		f(P*H, -1, false)
		for l := range m.Layers {
			f(H, l, false) // ln_1
			f(H, l, false)
			f(H*3*H, l, false) // c_attn
			f(3*H, l, false)
			f(H*H, l, false) // c_proj
			f(H, l, false)
			f(H, l, false) // ln_2
			f(H, l, false)
			f(H*I, l, false) // c_fc
			f(I, l, false)
			f(I*H, l, false) // c_proj
			f(H, l, false)
		}
		f(H, -1, false) // ln_f
		f(H, -1, false)
		return
	}
	f(V*H, -1, false) // word embeddings
	f(P*H, -1, false) // position embeddings
	if m.TypeVocab > 0 {
		f(m.TypeVocab*H, -1, false)
	}
	f(H, -1, false) // LayerNorm
	f(H, -1, false)
	f(P*2, -1, true) // position_ids (int64 as two elements of 4 bytes)
	if m.TypeVocab > 0 {
		f(P*2, -1, true) // token_type_ids
	}
	for l := range m.Layers {
		for range 3 { // query, key, value
			f(H*H, l, false)
			f(H, l, false)
		}
		f(H*H, l, false) // attention output dense
		f(H, l, false)
		f(H, l, false) // LayerNorm
		f(H, l, false)
		f(I*H, l, false) // intermediate
		f(I, l, false)
		f(H*I, l, false) // output
		f(H, l, false)
		f(H, l, false) // LayerNorm
		f(H, l, false)
	}
	f(H*H, -1, false) // pooler
	f(H, -1, false)
	if k == Train {
		f(numLabels*H, -1, false) // classifier
		f(numLabels, -1, false)
	}
}

// loadWeights moves agent a's model to the device.
func (g *gen) loadWeights(a *agent) {
	m := a.model
	f := m.DTypeBytes
	params(m, a.kind, func(elems, layer int, buffer bool) {
		if buffer {
			a.weights = append(a.weights, g.out(elems, 4, opBuffer, layer))
			return
		}
		a.weights = append(a.weights, g.out(elems, f, opParam, layer))
	})
}

// layerNorm runs native_layer_norm over rows of width h: the output, and
// the per-row mean and rstd it always returns, freed at once (inference).
func (g *gen) layerNorm(rows, h, f int, layer int) tensor {
	out := g.out(rows*h, f, opLayerNorm, layer)
	mean := g.alloc(uint64(rows)*4, opLayerNorm, layer)
	rstd := g.alloc(uint64(rows)*4, opLayerNorm, layer)
	g.freeT(mean)
	g.freeT(rstd)
	return out
}

// encoderForward runs an inference forward pass of BERT (transformers'
// BertModel, no attention mask) of batch b and length s on the current
// agent; it returns the last hidden state and the pooled output.
func (g *gen) encoderForward(m *ModelShape, b, s int) (hidden, pooled tensor) {
	H, I, A := m.Hidden, m.Intermediate, m.Heads
	f := m.DTypeBytes
	bs := b * s
	eager := g.cfg.EagerAttention

	// Eager attention adds the extended mask (all ones: none was given).
	var ones, ext tensor
	if eager {
		ones = g.out(bs, f, opOnes, -1)
		t := g.out(bs, f, opRsub, -1)
		ext = g.out(bs, f, opMul, -1)
		g.freeT(t)
	}

	// Embeddings: words + token types + positions, LayerNorm.
	posIDs := g.out(s, int64Bytes, opContiguous, -1)
	words := g.out(bs*H, f, opEmbedding, -1)
	types := g.tokenTypes(m, b, s)
	sum := g.out(bs*H, f, opAdd, -1)
	pos := g.out(s*H, f, opEmbedding, -1)
	sum2 := g.out(bs*H, f, opAdd, -1)
	g.freeT(sum)
	embOut := g.layerNorm(bs, H, f, -1)
	g.freeT(words)
	g.freeT(types)
	g.freeT(posIDs)
	g.freeT(sum2)
	g.freeT(pos)
	hidden = embOut

	for l := range m.Layers {
		// Self-attention.
		q := g.matmul(bs, H, H, f, opLinear, l)
		k := g.matmul(bs, H, H, f, opLinear, l)
		v := g.matmul(bs, H, H, f, opLinear, l)
		var ctx tensor
		if eager {
			sc := g.matmul(b*A*s, H/A, s, f, opMatmul, l)
			sc2 := g.out(b*A*s*s, f, opDiv, l)
			g.freeT(sc)
			sc3 := g.out(b*A*s*s, f, opAdd, l)
			g.freeT(sc2)
			p := g.out(b*A*s*s, f, opSoftmax, l)
			c := g.matmul(b*A*s, s, H/A, f, opMatmul, l)
			ctx = g.out(bs*H, f, opContiguous, l)
			g.freeT(c)
			g.freeT(sc3)
			g.freeT(p)
		} else {
			// scaled_dot_product_attention (memory-efficient kernel): its
			// output is laid out so that the transpose back is free.
			ctx = g.matmul(b*A*s, s, H/A, f, opSDPA, l)
		}
		g.freeT(q)
		g.freeT(k)
		g.freeT(v)
		// Self-output: dense, residual, LayerNorm.
		d := g.matmul(bs, H, H, f, opLinear, l)
		r := g.out(bs*H, f, opAdd, l)
		ln1 := g.layerNorm(bs, H, f, l)
		g.freeT(r)
		g.freeT(d)
		g.freeT(ctx)
		// Feed-forward.
		i1 := g.matmul(bs, H, I, f, opLinear, l)
		i2 := g.out(bs*I, f, opGELU, l)
		g.freeT(i1)
		o := g.matmul(bs, I, H, f, opLinear, l)
		r2 := g.out(bs*H, f, opAdd, l)
		ln2 := g.layerNorm(bs, H, f, l)
		g.freeT(r2)
		g.freeT(o)
		g.freeT(i2)
		g.freeT(ln1)
		// The layer's input is dropped when the loop moves on (the
		// embeddings' output stays referenced until the model returns).
		if l > 0 {
			g.freeT(hidden)
		}
		hidden = ln2
	}

	// Pooler: dense and tanh on the first token.
	pd := g.matmul(b, H, H, f, opLinear, -1)
	pooled = g.out(b*H, f, opTanh, -1)
	g.freeT(pd)
	g.freeT(embOut)
	if eager {
		g.freeT(ext)
		g.freeT(ones)
	}
	return hidden, pooled
}

// tokenTypes looks up the token-type embeddings: the buffer expanded to the
// batch is copied to be contiguous first, except for a batch of one.
func (g *gen) tokenTypes(m *ModelShape, b, s int) tensor {
	if m.TypeVocab == 0 {
		return tensor{}
	}
	var ids tensor
	if b > 1 {
		ids = g.out(b*s, int64Bytes, opContiguous, -1)
	}
	t := g.out(b*s*m.Hidden, m.DTypeBytes, opEmbedding, -1)
	g.freeT(ids)
	return t
}

// encodeRequest serves one inference request of an Encode agent: input ids
// to the device, a forward pass; the last hidden state is held, the rest
// freed.
func (g *gen) encodeRequest(a *agent) {
	b, s := g.batch(), g.seqLen()
	g.st.Requests++
	g.marker(trace.MarkerStep, g.stepText[0], uint64(g.st.Requests))
	ids := g.out(b*s, int64Bytes, opRandint, -1)
	hidden, pooled := g.encoderForward(a.model, b, s)
	g.freeT(pooled)
	g.freeT(ids)
	g.hold(hidden)
}

// decodeStep runs one step of a Decode agent: a new request's prompt
// forward pass, or one generated token.
func (g *gen) decodeStep(a *agent) {
	m := a.model
	if !a.busy {
		a.busy = true
		a.batch = g.batch()
		p := g.seqLen()
		a.left = g.cfg.DecodeMin + g.rng.IntN(g.cfg.DecodeMax-g.cfg.DecodeMin+1)
		a.length = 0
		g.st.Requests++
		g.marker(trace.MarkerStep, g.stepText[1], uint64(g.st.Requests))
		if a.kv == nil {
			a.kv = make([]kvCache, m.Layers)
		}
		a.nextIDs = g.out(a.batch*p, int64Bytes, opRandint, -1)
		g.decoderForward(a, p)
		return
	}
	g.decoderForward(a, 1)
	a.left--
	if a.left <= 0 {
		g.endDecode(a)
	}
}

// endDecode drops a decode request's KV cache and last token.
func (g *gen) endDecode(a *agent) {
	for l := range a.kv {
		g.freeT(a.kv[l].k)
		g.freeT(a.kv[l].v)
		a.kv[l] = kvCache{}
	}
	g.freeT(a.nextIDs)
	a.nextIDs = tensor{}
	a.busy = false
}

// decoderForward runs a GPT-2 forward pass (transformers' GPT2LMHeadModel
// with a DynamicCache) of n new tokens, computes the logits of every
// position, and takes the argmax of the last one as the next input.
func (g *gen) decoderForward(a *agent, n int) {
	m := a.model
	H, I, V, f := m.Hidden, m.Intermediate, m.Vocab, m.DTypeBytes
	b := a.batch
	bn := b * n
	lc := a.length + n // context after this step
	eager := g.cfg.EagerAttention

	emb := g.out(bn*H, f, opEmbedding, -1)
	tmp := g.out(n, int64Bytes, opContiguous, -1)
	cachePos := g.out(n, int64Bytes, opContiguous, -1)
	g.freeT(tmp)
	pos := g.out(n*H, f, opEmbedding, -1)
	hidden := g.out(bn*H, f, opAdd, -1)
	for l := range m.Layers {
		h1 := g.layerNorm(bn, H, f, l)
		qkv := g.matmul(bn, H, 3*H, f, opLinear, l)
		c := &a.kv[l]
		// The cache's keys and values: contiguous copies on the prompt,
		// then one token longer by torch.cat at every step.
		nk := g.out(b*lc*H, f, opCat, l)
		g.freeT(c.k)
		nv := g.out(b*lc*H, f, opCat, l)
		g.freeT(c.v)
		c.k, c.v = nk, nv
		var ctx tensor
		if eager {
			A := m.Heads
			sc := g.matmul(b*A*n, H/A, lc, f, opMatmul, l)
			sc2 := g.out(b*A*n*lc, f, opDiv, l)
			g.freeT(sc)
			p := g.out(b*A*n*lc, f, opSoftmax, l)
			g.freeT(sc2)
			cx := g.matmul(b*A*n, lc, H/A, f, opMatmul, l)
			g.freeT(p)
			ctx = g.out(bn*H, f, opContiguous, l)
			g.freeT(cx)
		} else {
			ctx = g.matmul(b*m.Heads*n, lc, H/m.Heads, f, opSDPA, l)
		}
		proj := g.matmul(bn, H, H, f, opLinear, l)
		g.freeT(ctx)
		g.freeT(qkv)
		h2 := g.out(bn*H, f, opAdd, l)
		g.freeT(h1)
		h3 := g.layerNorm(bn, H, f, l)
		fc := g.matmul(bn, H, I, f, opLinear, l)
		// gelu_new, 0.5*x*(1+tanh(sqrt(2/pi)*(x+0.044715*x^3))), evaluated
		// left to right.
		t1 := g.out(bn*I, f, opMul, l)
		t2 := g.out(bn*I, f, opPow, l)
		t3 := g.out(bn*I, f, opMul, l)
		g.freeT(t2)
		t4 := g.out(bn*I, f, opAdd, l)
		g.freeT(t3)
		t5 := g.out(bn*I, f, opMul, l)
		g.freeT(t4)
		t6 := g.out(bn*I, f, opTanh, l)
		g.freeT(t5)
		t7 := g.out(bn*I, f, opAdd, l)
		g.freeT(t6)
		act := g.out(bn*I, f, opMul, l)
		g.freeT(t1)
		g.freeT(t7)
		g.freeT(fc)
		out := g.matmul(bn, I, H, f, opLinear, l)
		g.freeT(act)
		h4 := g.out(bn*H, f, opAdd, l)
		g.freeT(h3)
		g.freeT(h2)
		g.freeT(proj)
		g.freeT(out)
		g.freeT(hidden)
		hidden = h4
	}
	lnf := g.layerNorm(bn, H, f, -1)
	g.freeT(hidden)
	g.freeT(cachePos)
	g.freeT(emb)
	g.freeT(pos)
	logits := g.matmul(bn, H, V, f, opLinear, -1)
	g.freeT(lnf)
	next := g.out(b, int64Bytes, opArgmax, -1)
	g.freeT(a.nextIDs)
	a.nextIDs = next
	g.freeT(logits)
	a.length = lc
}
