package history

import (
	"context"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	chamber "chamber.dev/chamber/api/v1alpha1"
)

// The store is a ring of ConfigMaps in one namespace, each named NamePrefix and a
// sequence number (chamber-history-1, -2, ...), labelled chamber.LabelHistory, its
// DataKey a CSV of at most RowsPerConfigMap jobs. A job is appended to the newest; a
// full one starts the next, and once the ring holds more than its limit of jobs the
// oldest ConfigMap is deleted, its jobs with it.
const (
	NamePrefix = "chamber-history-"
	DataKey    = "jobs.csv"
	// RowsPerConfigMap keeps each ConfigMap near 100 KB (a row is about 200 bytes),
	// far under the API server's 1 MiB: each append rewrites the newest one whole.
	RowsPerConfigMap = 500
)

// Store is the job history in its ConfigMaps. It is the ConfigMaps' one writer (the
// leader's recorder) and keeps their contents in memory after its first load; its
// methods are not safe for concurrent use.
type Store struct {
	// reader lists the ConfigMaps from the API server, not a cache: no informer on
	// every ConfigMap of the cluster.
	reader    client.Reader
	writer    client.Client
	namespace string
	// limit is the most jobs held; perMap the most in one ConfigMap.
	limit, perMap int

	loaded bool
	maps   []*corev1.ConfigMap // by sequence, oldest first
	rows   []int               // jobs in each of maps
	uids   map[types.UID]bool
	// horizon: a workload finished before it is not recorded, since it was and its
	// row is gone with a deleted ConfigMap (or it is older than every row held).
	horizon time.Time
}

// NewStore is the store in namespace, holding at most limit jobs in ConfigMaps of at
// most perMap (RowsPerConfigMap when 0).
func NewStore(reader client.Reader, writer client.Client, namespace string, limit, perMap int) *Store {
	if perMap <= 0 {
		perMap = RowsPerConfigMap
	}
	return &Store{reader: reader, writer: writer, namespace: namespace, limit: limit, perMap: min(perMap, limit)}
}

// Read lists the history's jobs in namespace, in the order they were recorded.
func Read(ctx context.Context, c client.Reader, namespace string) ([]Job, error) {
	maps, err := list(ctx, c, namespace)
	if err != nil {
		return nil, err
	}
	var jobs []Job
	for _, cm := range maps {
		rows, err := decodeRows(cm.Data[DataKey], "ConfigMap "+namespace+"/"+cm.Name)
		if err != nil {
			return nil, err
		}
		jobs = append(jobs, rows...)
	}
	return jobs, nil
}

// list is the history's ConfigMaps in namespace, oldest first.
func list(ctx context.Context, c client.Reader, namespace string) ([]*corev1.ConfigMap, error) {
	var l corev1.ConfigMapList
	if err := c.List(ctx, &l, client.InNamespace(namespace), client.MatchingLabels{chamber.LabelHistory: chamber.HistoryJobs}); err != nil {
		return nil, fmt.Errorf("list the history's ConfigMaps in %s: %w", namespace, err)
	}
	var maps []*corev1.ConfigMap
	for i := range l.Items {
		if _, ok := sequence(l.Items[i].Name); ok {
			maps = append(maps, &l.Items[i])
		}
	}
	slices.SortFunc(maps, func(a, b *corev1.ConfigMap) int {
		x, _ := sequence(a.Name)
		y, _ := sequence(b.Name)
		return x - y
	})
	return maps, nil
}

// sequence is the number in a history ConfigMap's name.
func sequence(name string) (int, bool) {
	n, err := strconv.Atoi(strings.TrimPrefix(name, NamePrefix))
	return n, err == nil && strings.HasPrefix(name, NamePrefix) && n > 0
}

// load reads the ConfigMaps once.
func (s *Store) load(ctx context.Context) error {
	maps, err := list(ctx, s.reader, s.namespace)
	if err != nil {
		return err
	}
	s.maps, s.rows, s.uids, s.horizon = maps, nil, map[types.UID]bool{}, time.Time{}
	total := 0
	for i, cm := range maps {
		jobs, err := decodeRows(cm.Data[DataKey], "ConfigMap "+s.namespace+"/"+cm.Name)
		if err != nil {
			return err
		}
		s.rows = append(s.rows, len(jobs))
		total += len(jobs)
		for _, j := range jobs {
			s.uids[j.UID] = true
			if i == 0 && (s.horizon.IsZero() || j.Finished.Before(s.horizon)) {
				s.horizon = j.Finished
			}
		}
	}
	// A ring short of its limit has dropped nothing (unless the limit was lowered):
	// every finished workload it lacks is new to it.
	if total+s.perMap <= s.limit {
		s.horizon = time.Time{}
	}
	s.loaded = true
	return nil
}

// Recorded says whether the store holds, or held, the workload.
func (s *Store) Recorded(ctx context.Context, uid types.UID, finished time.Time) (bool, error) {
	if !s.loaded {
		if err := s.load(ctx); err != nil {
			return false, err
		}
	}
	return s.uids[uid] || finished.Before(s.horizon), nil
}

// Append records the job unless the store holds it, and drops the oldest ConfigMaps
// beyond the limit. On a conflict (someone else wrote a ConfigMap) it reloads, and
// the caller tries again.
func (s *Store) Append(ctx context.Context, j Job) error {
	if done, err := s.Recorded(ctx, j.UID, j.Finished); err != nil || done {
		return err
	}
	err := s.append(ctx, j)
	if err != nil {
		s.loaded = false
	}
	return err
}

func (s *Store) append(ctx context.Context, j Job) error {
	row := encodeRow(j)
	if n := len(s.maps); n > 0 && s.rows[n-1] < s.perMap {
		cm := s.maps[n-1].DeepCopy()
		if cm.Data == nil {
			cm.Data = map[string]string{}
		}
		if !strings.HasPrefix(cm.Data[DataKey], header) {
			// Empty, or written before the last columns were added: rewritten with
			// them, unknown in the older rows.
			jobs, err := decodeRows(cm.Data[DataKey], "ConfigMap "+s.namespace+"/"+cm.Name)
			if err != nil {
				return err
			}
			data := header
			for _, old := range jobs {
				data += encodeRow(old)
			}
			cm.Data[DataKey] = data
		}
		cm.Data[DataKey] += row
		if err := s.writer.Update(ctx, cm); err != nil {
			return fmt.Errorf("record workload %s/%s in ConfigMap %s/%s: %w", j.Namespace, j.Workload, s.namespace, cm.Name, err)
		}
		s.maps[n-1] = cm
		s.rows[n-1]++
	} else {
		seq := 1
		if n > 0 {
			seq, _ = sequence(s.maps[n-1].Name)
			seq++
		}
		cm := &corev1.ConfigMap{
			ObjectMeta: metav1.ObjectMeta{Name: NamePrefix + strconv.Itoa(seq), Namespace: s.namespace,
				Labels: map[string]string{chamber.LabelHistory: chamber.HistoryJobs, chamber.LabelManagedBy: chamber.ManagedBy}},
			Data: map[string]string{DataKey: header + row},
		}
		if err := s.writer.Create(ctx, cm); err != nil {
			return fmt.Errorf("record workload %s/%s in a new ConfigMap %s/%s: %w", j.Namespace, j.Workload, s.namespace, cm.Name, err)
		}
		s.maps, s.rows = append(s.maps, cm), append(s.rows, 1)
	}
	s.uids[j.UID] = true
	for s.total() > s.limit {
		oldest := s.maps[0]
		if err := s.writer.Delete(ctx, oldest, client.Preconditions{ResourceVersion: &oldest.ResourceVersion}); client.IgnoreNotFound(err) != nil {
			return fmt.Errorf("drop the history's oldest ConfigMap %s/%s: %w", s.namespace, oldest.Name, err)
		}
		jobs, _ := decodeRows(oldest.Data[DataKey], oldest.Name)
		for _, old := range jobs {
			delete(s.uids, old.UID)
			if old.Finished.After(s.horizon) {
				s.horizon = old.Finished
			}
		}
		s.maps, s.rows = s.maps[1:], s.rows[1:]
	}
	return nil
}

func (s *Store) total() int {
	n := 0
	for _, r := range s.rows {
		n += r
	}
	return n
}

// IsConflict says whether err is a write that lost to another (a reload and a retry
// fix it).
func IsConflict(err error) bool { return apierrors.IsConflict(err) || apierrors.IsAlreadyExists(err) }
