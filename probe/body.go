package probe

import (
	"bytes"
	"math"
	"strconv"
	"time"
)

// A probe answers a traffic request (any path but its own endpoints) with
// one line that names it and stamps its clock:
//
//	pod=NAME time=UNIXNS
//
// the two facts HeaderPod and HeaderTime carry on its other replies. They
// travel in the body because headers cost the probe more than the rest of
// its work on a request (see replyTraffic); ingresses and proxies pass a
// body on unchanged.
const (
	bodyPod  = "pod="
	bodyTime = " time="
)

// maxPodName is the longest pod name (a DNS subdomain, 253 characters).
const maxPodName = 253

// AppendTrafficBody appends the traffic body of pod at at to b.
func AppendTrafficBody(b []byte, pod string, at time.Time) []byte {
	b = append(append(append(b, bodyPod...), pod...), bodyTime...)
	return append(strconv.AppendInt(b, at.UnixNano(), 10), '\n')
}

// MaxTrafficBody is the longest traffic body a probe writes.
const MaxTrafficBody = len(bodyPod) + maxPodName + len(bodyTime) + 20 + 1

// ParseTrafficBody reads a traffic body: the pod's name and its clock in
// unix ns; ok is false if b is anything else (another server's body).
func ParseTrafficBody(b []byte) (pod []byte, ns int64, ok bool) {
	line, found := bytes.CutSuffix(b, []byte{'\n'})
	if !found || !bytes.HasPrefix(line, []byte(bodyPod)) {
		return nil, 0, false
	}
	i := bytes.LastIndex(line, []byte(bodyTime))
	if i < len(bodyPod)+1 {
		return nil, 0, false
	}
	digits := line[i+len(bodyTime):]
	if len(digits) == 0 {
		return nil, 0, false
	}
	for _, c := range digits {
		if c < '0' || c > '9' || ns > (math.MaxInt64-9)/10 {
			return nil, 0, false
		}
		ns = ns*10 + int64(c-'0')
	}
	if ns <= 0 {
		return nil, 0, false
	}
	return line[len(bodyPod):i], ns, true
}
