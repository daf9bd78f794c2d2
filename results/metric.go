package results

import "strings"

// NormalizeMetric maps the typeable spellings of a delta, "a->b" and
// "a..b", to its name "a→b"; other names pass unchanged.
func NormalizeMetric(name string) string {
	name = strings.TrimSpace(name)
	for _, sep := range []string{"->", ".."} {
		if a, b, ok := strings.Cut(name, sep); ok {
			return a + "→" + b
		}
	}
	return name
}
