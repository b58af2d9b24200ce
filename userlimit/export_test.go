package userlimit

// LenForTest is the number of keys a Memory holds state for.
func (m *Memory) LenForTest() int {
	n := 0
	for i := range m.shards {
		sh := &m.shards[i]
		sh.mu.Lock()
		n += len(sh.m)
		sh.mu.Unlock()
	}
	return n
}
