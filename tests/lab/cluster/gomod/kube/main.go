// Command kube is the GPU cluster lane's one Kubernetes binary: kube-apiserver,
// kube-controller-manager, kube-scheduler, kubelet and kubectl linked together and chosen by
// the name it is called by (a link named after the command) or by its first argument. The five
// share most of their packages, so one binary carries to the lent GPU machine in a fraction of
// the five binaries' size (that machine takes 64 MiB per call).
package main

import (
	"context"
	"fmt"
	"os"
	"path/filepath"

	"github.com/spf13/cobra"
	"k8s.io/component-base/cli"
	"k8s.io/component-base/logs"
	_ "k8s.io/client-go/plugin/pkg/client/auth"
	_ "k8s.io/component-base/logs/json/register"
	_ "k8s.io/component-base/metrics/prometheus/clientgo"
	_ "k8s.io/component-base/metrics/prometheus/version"
	kubectl "k8s.io/kubectl/pkg/cmd"
	kubectlutil "k8s.io/kubectl/pkg/cmd/util"
	apiserver "k8s.io/kubernetes/cmd/kube-apiserver/app"
	controllermanager "k8s.io/kubernetes/cmd/kube-controller-manager/app"
	scheduler "k8s.io/kubernetes/cmd/kube-scheduler/app"
	kubelet "k8s.io/kubernetes/cmd/kubelet/app"
	_ "time/tzdata"
)

var commands = map[string]func() *cobra.Command{
	"kube-apiserver":          apiserver.NewAPIServerCommand,
	"kube-controller-manager": controllermanager.NewControllerManagerCommand,
	"kube-scheduler":          func() *cobra.Command { return scheduler.NewSchedulerCommand() },
	"kubelet":                 func() *cobra.Command { return kubelet.NewKubeletCommand(context.Background()) },
}

func main() {
	name := filepath.Base(os.Args[0])
	if _, ok := commands[name]; !ok && name != "kubectl" && len(os.Args) > 1 {
		name = os.Args[1]
		os.Args = append([]string{name}, os.Args[2:]...)
	}
	if name == "kubectl" {
		logs.GlogSetter(kubectl.GetLogVerbosity(os.Args)) // nolint:errcheck
		if err := cli.RunNoErrOutput(kubectl.NewDefaultKubectlCommand()); err != nil {
			kubectlutil.CheckErr(err)
		}
		return
	}
	newCommand, ok := commands[name]
	if !ok {
		fmt.Fprintln(os.Stderr, "usage: kube {kube-apiserver|kube-controller-manager|kube-scheduler|kubelet|kubectl} [args]")
		os.Exit(2)
	}
	os.Exit(cli.Run(newCommand()))
}
