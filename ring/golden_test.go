package ring

// Golden values for TestGolden, recorded from the first release of the
// ring. Change them only together with a plan for mixed-version clusters.
var goldenOwners = map[string]string{
	"":        "10.0.0.2:11211",
	"bar":     "10.0.0.3:11211",
	"baz":     "10.0.0.3:11211",
	"foo":     "10.0.0.2:11211",
	"qux":     "10.0.0.3:11211",
	"user:42": "10.0.0.1:11211",
}

const (
	goldenXX  = 0x617c3e40dddc188  // xxHash64("a#0"), seed 0
	goldenFNV = 0x1d08f3cbebddf3a9 // fmix64(FNV-1a-64("a#0"))
)
