package projector

// deadlines is a binary min-heap of live leases ordered by (deadline, job id):
// a total order, so expiries fire in the same order on every replay. Each
// live lease is in it exactly once; a job records its own index.
type deadlines []*job

func (h deadlines) less(a, b int) bool {
	if h[a].deadline != h[b].deadline {
		return h[a].deadline < h[b].deadline
	}
	return h[a].ID < h[b].ID
}

func (h deadlines) swap(a, b int) {
	h[a], h[b] = h[b], h[a]
	h[a].heapIdx = a
	h[b].heapIdx = b
}

func (h *deadlines) push(j *job) {
	j.heapIdx = len(*h)
	*h = append(*h, j)
	h.up(len(*h) - 1)
}

func (h *deadlines) remove(i int) {
	s := *h
	n := len(s) - 1
	j := s[i]
	if i != n {
		s.swap(i, n)
	}
	s[n] = nil
	*h = s[:n]
	if i != n {
		if !h.down(i) {
			h.up(i)
		}
	}
	j.heapIdx = -1
}

func (h deadlines) fix(i int) {
	if !h.down(i) {
		h.up(i)
	}
}

func (h deadlines) up(i int) {
	for i > 0 {
		parent := (i - 1) / 2
		if !h.less(i, parent) {
			return
		}
		h.swap(i, parent)
		i = parent
	}
}

// down sifts i toward the leaves and reports whether it moved.
func (h deadlines) down(i0 int) bool {
	i := i0
	n := len(h)
	for {
		l := 2*i + 1
		if l >= n || l < 0 {
			break
		}
		c := l
		if r := l + 1; r < n && h.less(r, l) {
			c = r
		}
		if !h.less(c, i) {
			break
		}
		h.swap(i, c)
		i = c
	}
	return i > i0
}
