package measure

import (
	"sync"
	"time"

	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/tools/cache"
	"k8s.io/utils/clock"
)

// maxStamps bounds the stamps waiting for their handler. Every watch event
// reaches a handler (one delta each), so the map stays at the informer's
// backlog; the bound only guards against a handler that never comes (two
// deletions of one object merged by DeltaFIFO's dedupDeltas).
const maxStamps = 1 << 16

// door stamps watch events on the tool's clock the moment the watch stream
// hands them over — before client-go queues them (the reflector's
// DeltaFIFO, then each handler's buffer: tools/cache/shared_informer.go
// processorListener.pop/run). A handler busy with one event (a Service of
// thousands of endpoints takes a while to scan) therefore delays the next
// event's handling, never its stamp. Handlers look their event's stamp up by
// object UID and resourceVersion, which identify one watch event.
type door struct {
	clock clock.PassiveClock
	mu    sync.Mutex
	at    map[stampKey]time.Time
	// cost, when set, receives how long each stamp took (make bench).
	cost func(time.Duration)
}

type stampKey struct {
	uid types.UID
	rv  string
}

func newDoor(clk clock.PassiveClock) *door {
	return &door{clock: clk, at: map[stampKey]time.Time{}}
}

// stamp records now as the arrival of the event carrying obj.
func (d *door) stamp(obj runtime.Object) {
	now := d.clock.Now()
	m, err := meta.Accessor(obj)
	if err != nil {
		return
	}
	d.mu.Lock()
	if len(d.at) >= maxStamps {
		clear(d.at)
	}
	d.at[stampKey{m.GetUID(), m.GetResourceVersion()}] = now
	d.mu.Unlock()
	if d.cost != nil {
		d.cost(d.clock.Since(now))
	}
}

// take returns, and forgets, the arrival stamp of the event that delivered
// obj; ok is false for objects that came from a list (the informer's first
// list or a relist), which no watch event carried: their handler stamps.
func (d *door) take(obj any) (time.Time, bool) {
	if u, isUnknown := obj.(cache.DeletedFinalStateUnknown); isUnknown {
		obj = u.Obj
	}
	m, err := meta.Accessor(obj)
	if err != nil {
		return time.Time{}, false
	}
	k := stampKey{m.GetUID(), m.GetResourceVersion()}
	d.mu.Lock()
	defer d.mu.Unlock()
	t, ok := d.at[k]
	if ok {
		delete(d.at, k)
	}
	return t, ok
}

// seen is the instant to record for an event handler's obj: its arrival at
// the door, or now when it did not come through one.
func (d *door) seen(obj any) time.Time {
	if t, ok := d.take(obj); ok {
		return t
	}
	return d.clock.Now()
}

// wrap passes the events of w (a watch just opened, or err) through the
// door.
func (d *door) wrap(w watch.Interface, err error) (watch.Interface, error) {
	if err != nil {
		return nil, err
	}
	sw := &stampedWatch{inner: w, out: make(chan watch.Event), stop: make(chan struct{})}
	go func() {
		defer close(sw.out)
		for ev := range w.ResultChan() {
			switch ev.Type {
			case watch.Added, watch.Modified, watch.Deleted:
				d.stamp(ev.Object)
			}
			select {
			case sw.out <- ev:
			case <-sw.stop:
				return
			}
		}
	}()
	return sw, nil
}

// stampedWatch forwards a watch's events once the door has stamped them.
type stampedWatch struct {
	inner watch.Interface
	out   chan watch.Event
	once  sync.Once
	stop  chan struct{}
}

func (s *stampedWatch) ResultChan() <-chan watch.Event { return s.out }

func (s *stampedWatch) Stop() {
	s.once.Do(func() {
		close(s.stop)
		s.inner.Stop()
	})
}
