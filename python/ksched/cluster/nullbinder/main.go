// nullbinder binds the pending pods of one schedulerName round-robin over the
// nodes, with no scheduling logic: it makes exactly the API writes a scheduler
// must make for each pod (the pods/binding subresource and the `Scheduled`
// event) and nothing else. `ksched bench --cluster` runs it as the ceiling the
// API server allows on a given machine.
//
// It writes as ksched and kube-scheduler do: protobuf bodies, and binds before
// events (a worker posts an event only when no bind waits), so that its drain,
// timed to the last bind, is the binds' ceiling and not binds and events in turn.
package main

import (
	"context"
	"flag"
	"fmt"
	"net"
	"os"
	"os/signal"
	"sort"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	corev1 "k8s.io/api/core/v1"
	eventsv1 "k8s.io/api/events/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/tools/clientcmd"
)

// Scheduled events the API server refused (printed at the end: the bench's ceiling counts them).
var eventErrors atomic.Int64

type work struct {
	namespace, name string
	uid             types.UID
}

func main() {
	kubeconfig := flag.String("kubeconfig", "", "kubeconfig of the cluster")
	schedulerName := flag.String("scheduler-name", "null-binder", "bind the pending pods with this spec.schedulerName")
	workers := flag.Int("workers", 64, "concurrent binds")
	qps := flag.Float64("qps", 20000, "client QPS")
	burst := flag.Int("burst", 40000, "client burst")
	events := flag.Bool("events", true, "post a Scheduled event for each bound pod")
	readyFile := flag.String("ready-file", "", "written once the nodes and pending pods are listed")
	shared := flag.Bool("shared-connection", false, "all workers on client-go's one HTTP/2 connection (as kube-scheduler)")
	flag.Parse()

	config, err := clientcmd.BuildConfigFromFlags("", *kubeconfig)
	if err != nil {
		fail("kubeconfig: %v", err)
	}
	config.QPS = float32(*qps)
	config.Burst = *burst
	config.UserAgent = "nullbinder"
	// Protobuf, as kube-scheduler and ksched read and write: JSON bodies cost the API server
	// more per bind and per listed pod.
	config.ContentType = "application/vnd.kubernetes.protobuf"
	config.AcceptContentTypes = "application/vnd.kubernetes.protobuf,application/json"
	client, err := kubernetes.NewForConfig(config)
	if err != nil {
		fail("client: %v", err)
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT)
	defer stop()

	list, err := client.CoreV1().Nodes().List(ctx, metav1.ListOptions{})
	if err != nil {
		fail("listing nodes: %v", err)
	}
	nodes := make([]string, 0, len(list.Items))
	for _, n := range list.Items {
		nodes = append(nodes, n.Name)
	}
	sort.Strings(nodes)
	if len(nodes) == 0 {
		fail("the cluster has no nodes")
	}

	queue := make(chan work, 1<<20)
	var seen sync.Map
	enqueue := func(obj interface{}) {
		pod, ok := obj.(*corev1.Pod)
		if !ok || pod.Spec.NodeName != "" || pod.DeletionTimestamp != nil {
			return
		}
		if _, dup := seen.LoadOrStore(pod.UID, struct{}{}); dup {
			return
		}
		queue <- work{pod.Namespace, pod.Name, pod.UID}
	}
	// Its pods by scheduler name only; the bound ones are dropped by the handler. A selector
	// of spec.nodeName="" is an exact match on the watch cache's pod index, the kubelet's
	// kind of watch: the API server gives such a watcher a buffer of 10 events, and every
	// pending pod's event reaches it. A backlog created while the binder was paused, or a
	// drain's binds, overflowed it and the API server closed it (42 times in one 500-node
	// run); each relist cost the drain. kube-scheduler and ksched watch without it.
	selector := fields.OneTermEqualSelector("spec.schedulerName", *schedulerName).String()
	factory := informers.NewSharedInformerFactoryWithOptions(client, 0,
		informers.WithTweakListOptions(func(o *metav1.ListOptions) { o.FieldSelector = selector }))
	informer := factory.Core().V1().Pods().Informer()
	if _, err := informer.AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    enqueue,
		UpdateFunc: func(_, obj interface{}) { enqueue(obj) },
	}); err != nil {
		fail("informer: %v", err)
	}
	factory.Start(ctx.Done())
	if !cache.WaitForCacheSync(ctx.Done(), informer.HasSynced) {
		fail("the pod informer did not sync")
	}

	// Scheduled events wait here: a worker takes a bind first (as ksched's writers do), so
	// events never hold a bind back.
	reports := make(chan report, 1<<20)
	var next atomic.Uint64
	var bound, failed atomic.Int64
	host, _ := os.Hostname()
	var wg sync.WaitGroup
	for range *workers {
		var writer kubernetes.Interface = client
		if !*shared {
			if writer, err = workerClient(config); err != nil {
				fail("client: %v", err)
			}
		}
		// Connected (TCP and TLS) before it is ready, as ksched's writers are: no handshake
		// in the timed drain.
		if _, err := writer.Discovery().ServerVersion(); err != nil {
			fail("connecting worker: %v", err)
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			take := func(w work) {
				node := nodes[next.Add(1)%uint64(len(nodes))]
				if !bind(ctx, writer, w, node) {
					failed.Add(1)
					return
				}
				bound.Add(1)
				if *events {
					reports <- report{w, node}
				}
			}
			for {
				select {
				case <-ctx.Done():
					return
				case w := <-queue:
					take(w)
					continue
				default:
				}
				select {
				case <-ctx.Done():
					return
				case w := <-queue:
					take(w)
				case r := <-reports:
					postEvent(ctx, writer, r, *schedulerName, host)
				}
			}
		}()
	}
	if *readyFile != "" {
		if err := os.WriteFile(*readyFile, []byte("ready\n"), 0o644); err != nil {
			fail("ready file: %v", err)
		}
	}
	fmt.Printf("nullbinder: %d nodes, %d workers, binding pods of %q\n", len(nodes), *workers, *schedulerName)
	wg.Wait()
	fmt.Printf("nullbinder: bound %d pods, %d failed, %d events refused\n", bound.Load(), failed.Load(), eventErrors.Load())
}

// workerClient is a client of a worker's own: HTTP/1.1 on a connection of its own (a dialer
// of its own keeps client-go from handing every client its one cached transport), so the
// workers' requests reach the API server side by side rather than as streams of one
// HTTP/2 connection, which held the binder well below the API server's ceiling here.
func workerClient(base *rest.Config) (kubernetes.Interface, error) {
	config := rest.CopyConfig(base)
	config.TLSClientConfig.NextProtos = []string{"http/1.1"}
	config.Dial = (&net.Dialer{Timeout: 30 * time.Second, KeepAlive: 30 * time.Second}).DialContext
	return kubernetes.NewForConfig(config)
}

type report struct {
	w    work
	node string
}

func bind(ctx context.Context, client kubernetes.Interface, w work, node string) bool {
	binding := &corev1.Binding{
		ObjectMeta: metav1.ObjectMeta{Namespace: w.namespace, Name: w.name, UID: w.uid},
		Target:     corev1.ObjectReference{Kind: "Node", Name: node},
	}
	if err := client.CoreV1().Pods(w.namespace).Bind(ctx, binding, metav1.CreateOptions{}); err != nil {
		fmt.Fprintf(os.Stderr, "binding %s/%s: %v\n", w.namespace, w.name, err)
		return false
	}
	return true
}

func postEvent(ctx context.Context, client kubernetes.Interface, r report, schedulerName, host string) {
	w := r.w
	t := time.Now()
	now := metav1.NewMicroTime(t)
	event := &eventsv1.Event{
		// Named as client-go's events recorder names them: a generateName ending in "." is
		// not a valid name prefix, and the API server rejects the event.
		ObjectMeta:          metav1.ObjectMeta{Namespace: w.namespace, Name: fmt.Sprintf("%s.%x", w.name, t.UnixNano())},
		EventTime:           now,
		ReportingController: schedulerName,
		ReportingInstance:   schedulerName + "-" + host,
		Action:              "Binding",
		Reason:              "Scheduled",
		Regarding:           corev1.ObjectReference{Kind: "Pod", Namespace: w.namespace, Name: w.name, UID: w.uid, APIVersion: "v1"},
		Note:                fmt.Sprintf("Successfully assigned %s/%s to %s", w.namespace, w.name, r.node),
		Type:                corev1.EventTypeNormal,
	}
	if _, err := client.EventsV1().Events(w.namespace).Create(ctx, event, metav1.CreateOptions{}); err != nil {
		fmt.Fprintf(os.Stderr, "event for %s/%s: %v\n", w.namespace, w.name, err)
		eventErrors.Add(1)
	}
}

func fail(format string, args ...interface{}) {
	fmt.Fprintf(os.Stderr, "nullbinder: "+format+"\n", args...)
	os.Exit(1)
}
