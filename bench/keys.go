package bench

import (
	"hash/crc32"
	"math"
	"math/rand/v2"
	"strconv"
)

// zipf draws ranks 0..n-1 with P(rank k) proportional to 1/(k+1)^s, for any
// s > 0. math/rand's Zipf needs s > 1, but cache workloads are usually
// described with s just below 1 (0.95, 0.99), so this is Hörmann and
// Derflinger's rejection-inversion ("Rejection-inversion to generate variates
// from monotone discrete distributions", 1996), as in Apache Commons RNG's
// RejectionInversionZipfSampler: O(1) memory and time per draw, any key count.
type zipf struct {
	n          float64
	s          float64 // exponent
	hX1        float64 // hIntegral(1.5) - 1
	hN         float64 // hIntegral(n + 0.5)
	acceptBand float64 // squeeze: accept k immediately when k-x <= acceptBand
}

func newZipf(n int, s float64) *zipf {
	z := &zipf{n: float64(n), s: s}
	z.hX1 = z.hIntegral(1.5) - 1
	z.hN = z.hIntegral(z.n + 0.5)
	z.acceptBand = 2 - z.hIntegralInverse(z.hIntegral(2.5)-z.h(2))
	return z
}

// rank returns a rank in [0, n): 0 is the most popular.
func (z *zipf) rank(r *rand.Rand) int {
	for {
		u := z.hN + r.Float64()*(z.hX1-z.hN)
		x := z.hIntegralInverse(u)
		k := math.Floor(x + 0.5)
		if k < 1 {
			k = 1
		} else if k > z.n {
			k = z.n
		}
		if k-x <= z.acceptBand || u >= z.hIntegral(k+0.5)-z.h(k) {
			return int(k) - 1
		}
	}
}

// h is the (unnormalised) density x^-s.
func (z *zipf) h(x float64) float64 { return math.Exp(-z.s * math.Log(x)) }

// hIntegral is an antiderivative of h: (x^(1-s) - 1) / (1-s), and log x at s = 1,
// written so that it stays accurate as s approaches 1.
func (z *zipf) hIntegral(x float64) float64 {
	logX := math.Log(x)
	return expm1Div((1-z.s)*logX) * logX
}

func (z *zipf) hIntegralInverse(x float64) float64 {
	t := x * (1 - z.s)
	if t < -1 {
		t = -1 // rounding can push t just below the domain of log1p
	}
	return math.Exp(log1pDiv(t) * x)
}

// log1pDiv is log(1+x)/x, continuous at 0.
func log1pDiv(x float64) float64 {
	if math.Abs(x) > 1e-8 {
		return math.Log1p(x) / x
	}
	return 1 - x*(0.5-x*(1.0/3-0.25*x))
}

// expm1Div is (e^x - 1)/x, continuous at 0.
func expm1Div(x float64) float64 {
	if math.Abs(x) > 1e-8 {
		return math.Expm1(x) / x
	}
	return 1 + x*0.5*(1+x*(1.0/3)*(1+0.25*x))
}

// opKind says what a request does.
type opKind uint8

const (
	opGet opKind = iota + 1
	opSet
)

// workload turns a seeded random stream into requests. One per worker: it is
// not safe for concurrent use, and two workloads built with the same
// arguments produce the same sequence.
type workload struct {
	rng      *rand.Rand
	keys     int
	zipf     *zipf // nil: uniform
	getShare float64
	valMin   int
	valMax   int
	hotKey   int
	hotShare float64
}

func newWorkload(cfg *Config, worker int) *workload {
	wl := &workload{
		// PCG with the worker number as its stream: deterministic per (Seed, worker).
		rng:      rand.New(rand.NewPCG(uint64(cfg.Seed), uint64(worker)*0x9e3779b97f4a7c15+1)),
		keys:     cfg.Keys,
		getShare: float64(cfg.Ratio.Gets) / float64(cfg.Ratio.Gets+cfg.Ratio.Sets),
		valMin:   cfg.ValueSize.Min,
		valMax:   cfg.ValueSize.Max,
		hotKey:   hotKey(cfg.Keys),
		hotShare: cfg.HotShare,
	}
	if cfg.Zipf > 0 {
		wl.zipf = newZipf(cfg.Keys, cfg.Zipf)
	}
	return wl
}

// hotKey is the key that turns hot in the flash-sale scenario: the least
// popular rank, so the change is visible against the Zipf background.
func hotKey(keys int) int { return keys - 1 }

// key draws a key index; hot says whether the flash sale has started.
func (wl *workload) key(hot bool) int {
	if hot && wl.hotShare > 0 && wl.rng.Float64() < wl.hotShare {
		return wl.hotKey
	}
	if wl.zipf == nil {
		return wl.rng.IntN(wl.keys)
	}
	return wl.zipf.rank(wl.rng)
}

// kind draws get or set according to the ratio.
func (wl *workload) kind() opKind {
	if wl.getShare >= 1 || wl.rng.Float64() < wl.getShare {
		return opGet
	}
	return opSet
}

// valueSize draws a size in [valMin, valMax].
func (wl *workload) valueSize() int {
	if wl.valMax <= wl.valMin {
		return wl.valMin
	}
	return wl.valMin + wl.rng.IntN(wl.valMax-wl.valMin+1)
}

// appendKey appends the name of key i: prefix + decimal index.
func appendKey(dst []byte, prefix string, i int) []byte {
	dst = append(dst, prefix...)
	return strconv.AppendInt(dst, int64(i), 10)
}

// pickHashed picks the server index for key the way gomemcache's default
// ServerList does (crc32 IEEE of the key, modulo the server count), so
// "hashed" measures what a plain memcached client fleet would do.
func pickHashed(key []byte, n int) int {
	if n <= 1 {
		return 0
	}
	return int(crc32.ChecksumIEEE(key) % uint32(n))
}
