package lint

import (
	"strings"
	"testing"
	"time"

	"github.com/epwindow/epwindow/results"
)

// A run with --dns whose DNS clients raised the preStop holds workloads to
// that number and says why in every finding's source.
func TestFromRecommendationDNS(t *testing.T) {
	r := &results.Recommendation{PreStopSeconds: 32, DrainNS: int64(time.Second), HeadroomNS: int64(5 * time.Second),
		DNS: &results.DNSCover{PreStopSeconds: 32, TTLNS: int64(30 * time.Second), Raised: true}}
	tg := FromRecommendation(r, "run.jsonl")
	if tg.PreStopSeconds() != 32 || !strings.Contains(tg.From, "raised for DNS clients: dns_removed + TTL 30s") {
		t.Errorf("target %+v", tg)
	}
	r.DNS.Raised = false
	if tg := FromRecommendation(r, "run.jsonl"); tg.From != "run.jsonl" {
		t.Errorf("not raised: from %q", tg.From)
	}
}
