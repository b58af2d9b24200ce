package suppress_test

import "runtime"

type runtimeAlloc struct{ total uint64 }

func (r *runtimeAlloc) read() {
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	r.total = ms.TotalAlloc
}
