package probe

import (
	"math"
	"strconv"
	"testing"
	"time"
)

func TestTrafficBodyRoundTrip(t *testing.T) {
	for _, pod := range []string{"p", "web-7c9f5d-x2k4q", "a time= b", string(make([]byte, maxPodName))} {
		at := time.Unix(0, 1796194270079000595)
		b := AppendTrafficBody(nil, pod, at)
		if len(b) > MaxTrafficBody {
			t.Errorf("%d bytes for a %d-character name, over MaxTrafficBody %d", len(b), len(pod), MaxTrafficBody)
		}
		got, ns, ok := ParseTrafficBody(b)
		if !ok || string(got) != pod || ns != at.UnixNano() {
			t.Errorf("ParseTrafficBody(%q) = %q, %d, %t; want %q, %d", b, got, ns, ok, pod, at.UnixNano())
		}
	}
}

// Another server's body is not a probe's: the generator then looks at the
// headers, and a response with neither is unattributed.
func TestTrafficBodyRejects(t *testing.T) {
	for _, b := range []string{
		"", "ok\n", "pod-a\n", "pod=a time=123", "pod= time=123\n", "pod=a time=\n", "pod=a time=12x\n",
		"pod=a time=0\n", "pod=a time=-5\n", "pod=a\n", "xpod=a time=1\n",
		"pod=a time=" + strconv.FormatUint(math.MaxUint64, 10) + "\n",
		"pod=a time=1\nmore\n",
	} {
		if pod, ns, ok := ParseTrafficBody([]byte(b)); ok {
			t.Errorf("ParseTrafficBody(%q) = %q, %d, true; want false", b, pod, ns)
		}
	}
}
