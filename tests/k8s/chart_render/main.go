// chart_render stands in for `helm template` in Paladin's tests, where helm itself cannot be
// installed: it renders a chart (deploy/helm/paladin) with the engine helm uses, Go's
// text/template with sprig's functions, plus the few functions and objects of helm's own that a
// chart calls. It is not helm and does only what Paladin's chart needs (see docs/kubernetes.md,
// "Helm chart"); and it compares two sets of manifests object by object, as parsed YAML.
//
//	chart_render template RELEASE CHART [-n NS] [-f VALUES.yaml]... [--set K=V]...
//	                      [--set-string K=V]... [--set-file K=PATH]... [--notes]
//	chart_render compare WANT.yaml GOT.yaml [--ignore-kind KIND]...
//
// template writes the rendered objects to stdout in helm's install order, each after a
// "# Source:" line as helm writes them; --notes writes the rendered NOTES.txt instead. compare
// exits 1 naming each object missing, extra or different and the first field that differs.
package main

import (
	"fmt"
	"os"
)

func usage() {
	fmt.Fprintln(os.Stderr, "usage: chart_render template RELEASE CHART [-n NS] [-f FILE]... "+
		"[--set K=V]... [--set-string K=V]... [--set-file K=PATH]... [--notes]\n"+
		"       chart_render compare WANT.yaml GOT.yaml [--ignore-kind KIND]...")
	os.Exit(2)
}

func main() {
	if len(os.Args) < 2 {
		usage()
	}
	var err error
	switch os.Args[1] {
	case "template":
		err = templateCmd(os.Args[2:])
	case "compare":
		var same bool
		same, err = compareCmd(os.Args[2:])
		if err == nil && !same {
			os.Exit(1)
		}
	default:
		usage()
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "chart_render:", err)
		os.Exit(2)
	}
}

func templateCmd(args []string) error {
	var opts renderOptions
	opts.Namespace = "default"
	var positional []string
	notes := false
	next := func(i *int, flag string) (string, error) {
		if *i+1 >= len(args) {
			return "", fmt.Errorf("%s needs a value", flag)
		}
		*i++
		return args[*i], nil
	}
	for i := 0; i < len(args); i++ {
		a := args[i]
		var v string
		var err error
		switch a {
		case "-n", "--namespace":
			v, err = next(&i, a)
			opts.Namespace = v
		case "-f", "--values":
			v, err = next(&i, a)
			opts.ValueFiles = append(opts.ValueFiles, v)
		case "--set", "--set-string", "--set-file":
			v, err = next(&i, a)
			opts.Sets = append(opts.Sets, setArg{Kind: a, Expr: v})
		case "--notes":
			notes = true
		default:
			if len(a) > 0 && a[0] == '-' {
				return fmt.Errorf("unknown flag %s (this is a stand-in for helm template, not helm)", a)
			}
			positional = append(positional, a)
		}
		if err != nil {
			return err
		}
	}
	if len(positional) != 2 {
		usage()
	}
	opts.ReleaseName, opts.ChartDir = positional[0], positional[1]
	out, err := renderChart(opts, notes)
	if err != nil {
		return err
	}
	_, err = os.Stdout.WriteString(out)
	return err
}

func compareCmd(args []string) (bool, error) {
	var files []string
	ignore := map[string]bool{}
	for i := 0; i < len(args); i++ {
		if args[i] == "--ignore-kind" && i+1 < len(args) {
			ignore[args[i+1]] = true
			i++
			continue
		}
		files = append(files, args[i])
	}
	if len(files) != 2 {
		usage()
	}
	want, err := readObjects(files[0], ignore)
	if err != nil {
		return false, err
	}
	got, err := readObjects(files[1], ignore)
	if err != nil {
		return false, err
	}
	diffs := compareObjects(want, got)
	for _, d := range diffs {
		fmt.Println(d)
	}
	if len(diffs) == 0 {
		fmt.Printf("same: %d objects\n", len(want.keys))
	}
	return len(diffs) == 0, nil
}
