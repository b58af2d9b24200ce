package digest

// WithLimits makes the store hold at most maxHeld jobs per user and keep
// at most maxMembers member ids per digest (tests: MaxHeld and MaxMembers
// are reached in a few steps).
func (r *Redis) WithLimits(maxHeld, maxMembers int) *Redis {
	r.limits = limits{maxHeld, maxMembers}
	return r
}

// WithLimits: as Redis's.
func (m *Memory) WithLimits(maxHeld, maxMembers int) *Memory {
	m.limits = limits{maxHeld, maxMembers}
	return m
}
