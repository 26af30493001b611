package firewall

import (
	"math/rand/v2"
	"slices"
	"testing"
	"time"

	"guard/rules"
)

// bench10k returns a 10,000-rule policy mixing hosts, wildcards, IPv4 and
// IPv6 CIDRs, ports and methods, and a set of flows that hit and miss it.
func bench10k(tb testing.TB) (string, *rules.Policy, []Flow) {
	r := rand.New(rand.NewPCG(2026, 11))
	text, hosts, nets := randomPolicyText(r, 10000)
	p, err := rules.ParseString(text)
	if err != nil {
		tb.Fatal(err)
	}
	flows := make([]Flow, 4096)
	for i := range flows {
		flows[i] = randomFlow(r, hosts, nets)
	}
	return text, p, flows
}

// BenchmarkVerdict10k measures one decision against a 10,000-rule policy.
// Besides ns/op (the mean) it reports the median of individually timed
// decisions (p50-ns, which includes the clock read) and the speed-up over a
// linear first-match scan of the same policy measured in the same run.
func BenchmarkVerdict10k(b *testing.B) {
	_, p, flows := bench10k(b)
	m := Compile(p)
	i := 0
	for b.Loop() {
		m.Verdict(flows[i&(len(flows)-1)])
		i++
	}
	b.StopTimer()
	indexed := perOp(func(f Flow) { m.Verdict(f) }, flows, 200000)
	linear := perOp(func(f Flow) { reference(p, f) }, flows, 2000)
	b.ReportMetric(medianNs(m, flows), "p50-ns")
	b.ReportMetric(linear/indexed, "x-faster-than-linear")
}

// BenchmarkVerdictLinear10k is the baseline: the obvious linear scan.
func BenchmarkVerdictLinear10k(b *testing.B) {
	_, p, flows := bench10k(b)
	i := 0
	for b.Loop() {
		reference(p, flows[i&(len(flows)-1)])
		i++
	}
}

// BenchmarkCompile10k measures compiling a parsed 10,000-rule policy.
func BenchmarkCompile10k(b *testing.B) {
	_, p, _ := bench10k(b)
	for b.Loop() {
		Compile(p)
	}
}

// BenchmarkParseCompile10k measures the whole path of a hot reload: parse
// 10,000 lines and compile them.
func BenchmarkParseCompile10k(b *testing.B) {
	text, _, _ := bench10k(b)
	b.SetBytes(int64(len(text)))
	for b.Loop() {
		p, err := rules.ParseString(text)
		if err != nil {
			b.Fatal(err)
		}
		Compile(p)
	}
}

func perOp(fn func(Flow), flows []Flow, n int) float64 {
	start := time.Now()
	for i := range n {
		fn(flows[i&(len(flows)-1)])
	}
	return float64(time.Since(start).Nanoseconds()) / float64(n)
}

func medianNs(m *Matcher, flows []Flow) float64 {
	samples := make([]time.Duration, 0, 50000)
	for i := range cap(samples) {
		f := flows[i&(len(flows)-1)]
		start := time.Now()
		m.Verdict(f)
		samples = append(samples, time.Since(start))
	}
	slices.Sort(samples)
	return float64(samples[len(samples)/2].Nanoseconds())
}
