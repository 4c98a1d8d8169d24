package cpu

// vec.go: small slice helpers shared by the backend and the Go paths of
// the kernels: grow for scratch that is reused, axpy and scaleVec for
// weighted sums. Plain Go loops only; the kernels' C paths have their own.

// grow returns s with length n, reallocating only when it is too short.
func grow[T any](s []T, n int) []T {
	if cap(s) < n {
		return make([]T, n)
	}
	return s[:n]
}

// scaleVec sets x *= c.
func scaleVec(x []float32, c float32) {
	for i := range x {
		x[i] *= c
	}
}

// axpy sets y += a·x.
func axpy(y []float32, a float32, x []float32) {
	x = x[:len(y)]
	i := 0
	for ; i+4 <= len(y); i += 4 {
		y[i] += a * x[i]
		y[i+1] += a * x[i+1]
		y[i+2] += a * x[i+2]
		y[i+3] += a * x[i+3]
	}
	for ; i < len(y); i++ {
		y[i] += a * x[i]
	}
}
