package nodeagent

import (
	"context"
	"encoding/json"
	"log/slog"
	"sync"
	"time"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
)

// statusSyncer writes the newest status of one pod to the API server,
// coalescing updates, as a strategic merge patch of the fields the agent
// owns (conditions merge by type, so the scheduler's PodScheduled stays).
type statusSyncer struct {
	a    *agent
	pod  *v1.Pod
	log  *slog.Logger
	mu   sync.Mutex
	want *v1.PodStatus
	sent *v1.PodStatus
	kick chan struct{}
	quit chan struct{}
	done chan struct{}
	once sync.Once
}

func newStatusSyncer(a *agent, pod *v1.Pod, log *slog.Logger) *statusSyncer {
	return &statusSyncer{a: a, pod: pod, log: log, kick: make(chan struct{}, 1), quit: make(chan struct{}), done: make(chan struct{})}
}

func (s *statusSyncer) set(st v1.PodStatus) {
	s.mu.Lock()
	if s.want != nil && equality.Semantic.DeepEqual(*s.want, st) {
		s.mu.Unlock()
		return
	}
	s.want = &st
	s.mu.Unlock()
	select {
	case s.kick <- struct{}{}:
	default:
	}
}

func (s *statusSyncer) run(ctx context.Context) {
	defer close(s.done)
	for {
		select {
		case <-ctx.Done():
			return
		case <-s.quit:
			return
		case <-s.kick:
		}
		for {
			s.mu.Lock()
			want := s.want
			s.mu.Unlock()
			if want == nil || (s.sent != nil && equality.Semantic.DeepEqual(*want, *s.sent)) {
				break
			}
			err := s.patch(ctx, want)
			if err == nil || apierrors.IsNotFound(err) || apierrors.IsInvalid(err) {
				if apierrors.IsInvalid(err) {
					s.log.Error("pod status rejected", "err", err)
				} else if err != nil {
					s.log.Debug("pod status: object already gone", "err", err)
				}
				s.sent = want
				continue
			}
			s.log.Error("pod status (retrying)", "err", err)
			select {
			case <-ctx.Done():
				return
			case <-s.quit:
				return
			case <-time.After(time.Second):
			}
		}
	}
}

// stop ends the syncer and waits for a write in flight.
func (s *statusSyncer) stop() {
	s.once.Do(func() { close(s.quit) })
	<-s.done
}

// flush writes the newest status now (after stop).
func (s *statusSyncer) flush(ctx context.Context) error {
	s.mu.Lock()
	want := s.want
	s.mu.Unlock()
	if want == nil {
		return nil
	}
	var err error
	for i := 0; i < 5; i++ {
		if err = s.patch(ctx, want); err == nil || apierrors.IsNotFound(err) || apierrors.IsInvalid(err) {
			return err
		}
		time.Sleep(200 * time.Millisecond)
	}
	return err
}

func (s *statusSyncer) patch(ctx context.Context, st *v1.PodStatus) error {
	b, err := statusPatch(s.pod.UID, st)
	if err != nil {
		return err
	}
	_, err = s.a.client.CoreV1().Pods(s.pod.Namespace).Patch(ctx, s.pod.Name, types.StrategicMergePatchType, b, metav1.PatchOptions{}, "status")
	return err
}

// statusPatch is the strategic merge patch that sets st on the pod with
// uid (the UID in the patch makes it fail on a same-named successor).
func statusPatch(uid types.UID, st *v1.PodStatus) ([]byte, error) {
	return json.Marshal(map[string]any{
		"metadata": map[string]any{"uid": uid},
		"status":   st,
	})
}
