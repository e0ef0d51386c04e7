package synth

import "github.com/fragsim/fragsim/trace"

// The training step follows what PyTorch 2.11 allocates for transformers'
// BertForSequenceClassification with AdamW (foreach) and dropout, as seen
// in a trace of traces/workloads/train.py: autograd frees each saved
// activation in the backward of the operator that saved it, linear layers'
// backward allocate their input, weight and bias gradients plus a reduction
// scratch, and the backward runs on its own thread (its own cuBLAS
// workspace).

// trainLayer holds what autograd saves in one encoder layer's forward.
type trainLayer struct {
	input                      tensor // the layer's input (saved by q, k and v)
	q, k, v, ctx, lse          tensor
	mask1, r, ln1, st1a, st1b  tensor
	fc, gelu                   tensor
	mask2, r2, ln2, st2a, st2b tensor
}

// trainStep runs one training step of a Train agent: new input ids and
// labels, forward with the activations autograd saves kept, the loss,
// backward (saved activations freed operator by operator, gradients
// allocated), an AdamW step and zero_grad(set_to_none=True).
func (g *gen) trainStep(a *agent) {
	m := a.model
	H, I, A, f := m.Hidden, m.Intermediate, m.Heads, m.DTypeBytes
	b, s := g.batch(), g.seqLen()
	bs := b * s
	g.st.Requests++
	g.marker(trace.MarkerStep, g.stepText[2], uint64(g.st.Requests))

	// The loop's variables: the previous step's ids and labels are dropped
	// when the new ones are assigned.
	ids := g.out(bs, int64Bytes, opRandint, -1)
	g.freeT(a.trainIDs)
	a.trainIDs = ids
	labels := g.out(b, int64Bytes, opRandint, -1)
	g.freeT(a.trainLabels)
	a.trainLabels = labels

	// Embeddings.
	words := g.out(bs*H, f, opEmbedding, -1)
	types := g.tokenTypes(m, b, s)
	sum := g.out(bs*H, f, opAdd, -1)
	pos := g.out(s*H, f, opEmbedding, -1)
	embSum := g.out(bs*H, f, opAdd, -1)
	g.freeT(sum)
	ln := g.out(bs*H, f, opLayerNorm, -1)
	embStA, embStB := g.alloc(uint64(bs)*4, opLayerNorm, -1), g.alloc(uint64(bs)*4, opLayerNorm, -1)
	embMask, embOut := g.dropoutTrain(bs*H, f, -1)
	g.freeT(ln)
	g.freeT(words)
	g.freeT(types)
	g.freeT(pos)

	// Encoder layers.
	if cap(a.layers) < m.Layers {
		a.layers = make([]trainLayer, m.Layers)
	}
	layers := a.layers[:m.Layers]
	hidden := embOut
	for l := range layers {
		t := &layers[l]
		t.input = hidden
		t.q = g.matmul(bs, H, H, f, opLinear, l)
		t.k = g.matmul(bs, H, H, f, opLinear, l)
		t.v = g.matmul(bs, H, H, f, opLinear, l)
		t.ctx = g.matmul(b*A*s, s, H/A, f, opSDPA, l)
		t.lse = g.alloc(uint64(b*A*((s+31)&^31))*4, opSDPA, l)
		d := g.matmul(bs, H, H, f, opLinear, l)
		var dd tensor
		t.mask1, dd = g.dropoutTrain(bs*H, f, l)
		g.freeT(d)
		t.r = g.out(bs*H, f, opAdd, l)
		t.ln1 = g.out(bs*H, f, opLayerNorm, l)
		t.st1a, t.st1b = g.alloc(uint64(bs)*4, opLayerNorm, l), g.alloc(uint64(bs)*4, opLayerNorm, l)
		g.freeT(dd)
		t.fc = g.matmul(bs, H, I, f, opLinear, l)
		t.gelu = g.out(bs*I, f, opGELU, l)
		o := g.matmul(bs, I, H, f, opLinear, l)
		var od tensor
		t.mask2, od = g.dropoutTrain(bs*H, f, l)
		g.freeT(o)
		t.r2 = g.out(bs*H, f, opAdd, l)
		t.ln2 = g.out(bs*H, f, opLayerNorm, l)
		t.st2a, t.st2b = g.alloc(uint64(bs)*4, opLayerNorm, l), g.alloc(uint64(bs)*4, opLayerNorm, l)
		g.freeT(od)
		hidden = t.ln2
	}

	// Head: pooler, dropout, classifier, cross-entropy. The output object
	// is dropped at once but for the loss, so the logits go.
	pd := g.matmul(b, H, H, f, opLinear, -1)
	pooled := g.out(b*H, f, opTanh, -1)
	g.freeT(pd)
	headMask, headOut := g.dropoutTrain(b*H, f, -1)
	logits := g.matmul(b, H, numLabels, f, opLinear, -1)
	logp := g.out(b*numLabels, f, opLogSoftmax, -1)
	loss := g.out(1, f, opNLLLoss, -1)
	totalWeight := g.out(1, f, opNLLLoss, -1)
	g.freeT(logits)

	// Backward, on autograd's thread: the head first.
	ps := g.trainParams(a)
	seed := g.out(1, f, opGrad, -1)
	gn := g.out(b*numLabels, f, opGrad, -1)
	g.freeT(totalWeight)
	gl := g.out(b*numLabels, f, opGrad, -1)
	g.freeT(gn)
	g.freeT(logp)
	gh := g.linearBackward(b, H, numLabels, f, -1, false)
	g.freeT(gl)
	g.freeT(headOut)
	gd := g.out(b*H, f, opGrad, -1)
	g.freeT(gh)
	g.freeT(headMask)
	gt := g.out(b*H, f, opGrad, -1)
	g.freeT(gd)
	g.freeT(pooled)
	gp := g.linearBackward(b, H, H, f, -1, false)
	g.freeT(gt)
	g.freeT(hidden)                    // the pooler's input, a view of the last layer's output
	grad := g.out(bs*H, f, opGrad, -1) // the first token's gradient, scattered
	g.freeT(gp)

	for l := len(layers) - 1; l >= 0; l-- {
		grad = g.layerBackward(a, &layers[l], grad, b, s, l)
	}

	// Embeddings: dropout, LayerNorm, then the three lookups (a sort of
	// the indices and its scratch, then the dense weight gradient).
	gde := g.out(bs*H, f, opGrad, -1)
	g.freeT(embMask)
	ge := g.layerNormBackward(bs, H, f, -1, gde, embSum, embStA, embStB)
	g.freeT(grad)
	for _, rows := range [3]int{m.Vocab, m.MaxPositions, m.TypeVocab} {
		if rows == 0 {
			continue
		}
		i1 := g.out(bs, int64Bytes, opGrad, -1)
		i2 := g.out(bs, int64Bytes, opGrad, -1)
		scratch := g.alloc(uint64(bs)*21, opGrad, -1)
		g.freeT(scratch)
		g.grads = append(g.grads, g.out(rows*H, f, opGrad, -1))
		g.freeT(i2)
		g.freeT(i1)
	}
	g.freeT(ge)
	g.freeT(seed)

	g.optimizerStep(a, ps)
	g.freeT(loss)
	g.sync()
}

// layerBackward runs the backward of encoder layer l, whose saved
// activations t are freed as autograd frees them, from the gradient grad
// of its output; it returns the gradient of its input.
func (g *gen) layerBackward(a *agent, t *trainLayer, grad tensor, b, s, l int) tensor {
	m := a.model
	H, I, A, f := m.Hidden, m.Intermediate, m.Heads, m.DTypeBytes
	bs := b * s
	// Output LayerNorm, dropout, feed-forward.
	g2 := g.layerNormBackward(bs, H, f, l, grad, t.r2, t.st2a, t.st2b)
	gd2 := g.out(bs*H, f, opGrad, l)
	g.freeT(t.mask2)
	gi := g.linearBackward(bs, I, H, f, l, true)
	g.freeT(gd2)
	g.freeT(t.gelu)
	gg := g.out(bs*I, f, opGrad, l)
	g.freeT(gi)
	g.freeT(t.fc)
	gf := g.linearBackward(bs, H, I, f, l, true)
	g.freeT(gg)
	g.freeT(t.ln1)
	g.freeT(gf) // accumulated into g2 (the residual path)
	// Attention LayerNorm, dropout, output dense, attention.
	g1 := g.layerNormBackward(bs, H, f, l, g2, t.r, t.st1a, t.st1b)
	gd1 := g.out(bs*H, f, opGrad, l)
	g.freeT(t.mask1)
	ga := g.linearBackward(bs, H, H, f, l, true)
	g.freeT(gd1)
	gq := g.out(bs*H, f, opGrad, l)
	gk := g.out(bs*H, f, opGrad, l)
	gv := g.out(bs*H, f, opGrad, l)
	gout := g.out(bs*H, f, opGrad, l)
	delta := g.alloc(uint64(b*A*s)*4, opGrad, l)
	delta2 := g.alloc(uint64(b*A*s)*4, opGrad, l)
	g.freeT(delta)
	g.freeT(gout)
	work := g.alloc(uint64(b*A*s)*304, opGrad, l)
	g.freeT(delta2)
	g.freeT(work)
	g.freeT(ga)
	g.freeT(t.k)
	g.freeT(t.q)
	g.freeT(t.v)
	g.freeT(t.lse)
	g.freeT(t.ctx)
	// Value, key and query projections; their input gradients are
	// accumulated into g1 (the residual path).
	for i, gx := range [3]tensor{gv, gk, gq} {
		gin := g.linearBackward(bs, H, H, f, l, true)
		g.freeT(gx)
		if i == 2 {
			g.freeT(t.input)
		}
		g.freeT(gin)
	}
	*t = trainLayer{}
	return g1
}

// optimizerStep runs AdamW (foreach) on the parameters of sizes ps, then
// zero_grad(set_to_none=True).
func (g *gen) optimizerStep(a *agent, ps []int) {
	f := a.model.DTypeBytes
	// AdamW (foreach): state on the first step, then one temporary per
	// parameter (the square root of the second moment), freed in reverse.
	if a.optState == nil {
		for _, n := range ps {
			a.optState = append(a.optState, g.out(n, f, opZerosLike, -1), g.out(n, f, opZerosLike, -1))
			g.st.PersistentBytes += 2 * uint64(n*f)
		}
	}
	g.scratch = g.scratch[:0]
	for _, n := range ps {
		g.scratch = append(g.scratch, g.out(n, f, opForeachSqrt, -1))
	}
	for i := len(g.scratch) - 1; i >= 0; i-- {
		g.freeT(g.scratch[i])
	}
	g.scratch = g.scratch[:0]
	// zero_grad(set_to_none=True).
	for _, t := range g.grads {
		g.freeT(t)
	}
	g.grads = g.grads[:0]
}

// dropoutTrain runs dropout in training: the byte mask, then the output.
func (g *gen) dropoutTrain(elems, f, layer int) (mask, out tensor) {
	mask = g.alloc(uint64(elems), opDropout, layer)
	out = g.out(elems, f, opDropout, layer)
	return mask, out
}

// layerNormBackward allocates the input gradient and the weight and bias
// gradients of a LayerNorm, then frees the incoming gradient and what the
// forward saved.
func (g *gen) layerNormBackward(rows, h, f, layer int, gradOut, input, mean, rstd tensor) tensor {
	gi := g.out(rows*h, f, opGrad, layer)
	g.grads = append(g.grads, g.out(h, f, opGrad, layer), g.out(h, f, opGrad, layer))
	g.freeT(gradOut)
	g.freeT(input)
	g.freeT(mean)
	g.freeT(rstd)
	return gi
}

// linearBackward allocates a linear layer's input gradient (rows x in),
// weight and bias gradients (kept until zero_grad) and, for large inputs,
// the bias reduction's scratch; it returns the input gradient.
func (g *gen) linearBackward(rows, in, out, f, layer int, scratch bool) tensor {
	gi := g.matmul(rows, out, in, f, opGrad, layer)
	g.backwardWorkspace()
	g.grads = append(g.grads, g.matmul(out, rows, in, f, opGrad, layer), g.out(out, f, opGrad, layer))
	if scratch {
		pad := (rows + 31) &^ 31
		s1 := g.alloc(uint64(2*pad*out*4), opGrad, layer)
		s2 := g.alloc(uint64(max(out/32, 1)), opGrad, layer)
		g.freeT(s2)
		g.freeT(s1)
	}
	return gi
}

// backwardWorkspace allocates the cuBLAS workspace of autograd's thread the
// first time it runs a matrix product.
func (g *gen) backwardWorkspace() {
	if g.bwdWS {
		return
	}
	g.bwdWS = true
	g.alloc(cublasWorkspaceBytes, opMatmul, -1)
	g.st.PersistentBytes += cublasWorkspaceBytes
	g.st.WorkspaceBytes += cublasWorkspaceBytes
}

// trainParams returns the element count of every parameter of a's model
// (no buffers), in parameter order.
func (g *gen) trainParams(a *agent) []int {
	if a.params == nil {
		params(a.model, a.kind, func(elems, _ int, buffer bool) {
			if !buffer {
				a.params = append(a.params, elems)
			}
		})
	}
	return a.params
}
