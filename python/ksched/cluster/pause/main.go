// The pod sandbox's process for the real nodes of `ksched cluster up --real-nodes`:
// it holds the pod's namespaces, reaps the children it inherits as PID 1 of a
// shared process namespace, and exits on SIGINT or SIGTERM. Built static, so its
// image is this one file.
package main

import (
	"os"
	"os/signal"
	"syscall"
)

func main() {
	if len(os.Args) > 1 && os.Args[1] == "-v" {
		os.Stdout.WriteString("ksched pause\n")
		return
	}
	stop := make(chan os.Signal, 1)
	signal.Notify(stop, syscall.SIGINT, syscall.SIGTERM)
	children := make(chan os.Signal, 16)
	signal.Notify(children, syscall.SIGCHLD)
	for {
		select {
		case <-stop:
			return
		case <-children:
			for {
				var status syscall.WaitStatus
				pid, err := syscall.Wait4(-1, &status, syscall.WNOHANG, nil)
				if pid <= 0 || err != nil {
					break
				}
			}
		}
	}
}
