package main

// The chart rendered as `helm template` renders it: Chart.yaml as .Chart, values.yaml merged
// with -f files and --set values as .Values, .Release, every template under templates/ executed
// by text/template with sprig's functions and helm's include, tpl, required, toYaml, fromYaml,
// toJson, fromJson and lookup; files named _* are partials, NOTES.txt is rendered on request.

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"text/template"

	"github.com/Masterminds/sprig"
	"gopkg.in/yaml.v3"
)

type setArg struct {
	Kind string // --set, --set-string or --set-file
	Expr string // KEY=VALUE[,KEY=VALUE...] (one KEY=PATH for --set-file)
}

type renderOptions struct {
	ReleaseName string
	Namespace   string
	ChartDir    string
	ValueFiles  []string
	Sets        []setArg
}

// helm's order of kinds when it writes or installs a release's objects; kinds not listed come
// after, by name.
var installOrder = []string{"Namespace", "NetworkPolicy", "ResourceQuota", "LimitRange",
	"PodSecurityPolicy", "PodDisruptionBudget", "ServiceAccount", "Secret", "SecretList",
	"ConfigMap", "StorageClass", "PersistentVolume", "PersistentVolumeClaim",
	"CustomResourceDefinition", "ClusterRole", "ClusterRoleList", "ClusterRoleBinding",
	"ClusterRoleBindingList", "Role", "RoleList", "RoleBinding", "RoleBindingList", "Service",
	"DaemonSet", "Pod", "ReplicationController", "ReplicaSet", "Deployment",
	"HorizontalPodAutoscaler", "StatefulSet", "Job", "CronJob", "IngressClass", "Ingress",
	"APIService"}

// Values are read as helm reads them: through JSON, so every number is a float64.
func readYAMLAsJSON(data []byte, what string) (map[string]interface{}, error) {
	var raw interface{}
	if err := yaml.Unmarshal(data, &raw); err != nil {
		return nil, fmt.Errorf("%s: %v", what, err)
	}
	if raw == nil {
		return map[string]interface{}{}, nil
	}
	j, err := json.Marshal(raw)
	if err != nil {
		return nil, fmt.Errorf("%s: %v", what, err)
	}
	var out map[string]interface{}
	if err := json.Unmarshal(j, &out); err != nil {
		return nil, fmt.Errorf("%s: not a mapping of values: %v", what, err)
	}
	return out, nil
}

// mergeValues sets src's values over dst's, maps key by key; a null in src removes the key.
func mergeValues(dst, src map[string]interface{}) {
	for k, v := range src {
		if v == nil {
			delete(dst, k)
			continue
		}
		sm, sok := v.(map[string]interface{})
		dm, dok := dst[k].(map[string]interface{})
		if sok && dok {
			mergeValues(dm, sm)
			continue
		}
		dst[k] = v
	}
}

// splitUnescaped splits s at sep outside braces and not after a backslash.
func splitUnescaped(s string, sep byte) []string {
	var parts []string
	var cur strings.Builder
	depth := 0
	for i := 0; i < len(s); i++ {
		c := s[i]
		switch {
		case c == '\\' && i+1 < len(s):
			cur.WriteByte(c)
			cur.WriteByte(s[i+1])
			i++
			continue
		case c == '{':
			depth++
		case c == '}':
			depth--
		case c == sep && depth == 0:
			parts = append(parts, cur.String())
			cur.Reset()
			continue
		}
		cur.WriteByte(c)
	}
	return append(parts, cur.String())
}

func unescape(s string) string {
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		if s[i] == '\\' && i+1 < len(s) {
			i++
		}
		b.WriteByte(s[i])
	}
	return b.String()
}

// typedValue reads a --set value as helm does: true, false, null and integers are typed, the
// rest (floats too) stays a string; --set-string keeps everything a string.
func typedValue(s string, asString bool) interface{} {
	s = unescape(s)
	if asString {
		return s
	}
	switch s {
	case "true":
		return true
	case "false":
		return false
	case "null":
		return nil
	}
	if s == "0" || (len(s) > 0 && s[0] != '0' && !(s[0] == '-' && len(s) > 1 && s[1] == '0')) {
		if n, err := strconv.ParseInt(s, 10, 64); err == nil {
			return n
		}
	}
	return s
}

type pathStep struct {
	key   string
	index int // -1: none
}

func parseKey(key string) ([]pathStep, error) {
	var steps []pathStep
	for _, part := range splitUnescaped(key, '.') {
		step := pathStep{index: -1}
		if i := strings.IndexByte(part, '['); i >= 0 && strings.HasSuffix(part, "]") {
			n, err := strconv.Atoi(part[i+1 : len(part)-1])
			if err != nil || n < 0 {
				return nil, fmt.Errorf("bad index in %q", key)
			}
			step.index = n
			part = part[:i]
		}
		if part == "" {
			return nil, fmt.Errorf("empty name in %q", key)
		}
		step.key = unescape(part)
		steps = append(steps, step)
	}
	return steps, nil
}

func setPath(m map[string]interface{}, steps []pathStep, v interface{}) {
	for i, st := range steps {
		last := i == len(steps)-1
		if st.index < 0 {
			if last {
				m[st.key] = v
				return
			}
			next, ok := m[st.key].(map[string]interface{})
			if !ok {
				next = map[string]interface{}{}
				m[st.key] = next
			}
			m = next
			continue
		}
		list, _ := m[st.key].([]interface{})
		for len(list) <= st.index {
			list = append(list, nil)
		}
		m[st.key] = list
		if last {
			list[st.index] = v
			return
		}
		next, ok := list[st.index].(map[string]interface{})
		if !ok {
			next = map[string]interface{}{}
			list[st.index] = next
		}
		m = next
	}
}

func applySet(vals map[string]interface{}, s setArg) error {
	exprs := []string{s.Expr}
	if s.Kind != "--set-file" {
		exprs = splitUnescaped(s.Expr, ',')
	}
	for _, e := range exprs {
		eq := strings.IndexByte(e, '=')
		if eq <= 0 {
			return fmt.Errorf("%s %q: want KEY=VALUE", s.Kind, e)
		}
		steps, err := parseKey(e[:eq])
		if err != nil {
			return fmt.Errorf("%s: %v", s.Kind, err)
		}
		raw := e[eq+1:]
		var v interface{}
		switch {
		case s.Kind == "--set-file":
			data, err := os.ReadFile(raw)
			if err != nil {
				return fmt.Errorf("--set-file: %v", err)
			}
			v = string(data)
		case strings.HasPrefix(raw, "{") && strings.HasSuffix(raw, "}"):
			list := []interface{}{}
			if inner := raw[1 : len(raw)-1]; inner != "" {
				for _, item := range splitUnescaped(inner, ',') {
					list = append(list, typedValue(item, s.Kind == "--set-string"))
				}
			}
			v = list
		default:
			v = typedValue(raw, s.Kind == "--set-string")
		}
		setPath(vals, steps, v)
	}
	return nil
}

func loadValues(opts renderOptions) (map[string]interface{}, error) {
	vals := map[string]interface{}{}
	if data, err := os.ReadFile(filepath.Join(opts.ChartDir, "values.yaml")); err == nil {
		if vals, err = readYAMLAsJSON(data, "values.yaml"); err != nil {
			return nil, err
		}
	} else if !os.IsNotExist(err) {
		return nil, err
	}
	user := map[string]interface{}{}
	for _, f := range opts.ValueFiles {
		data, err := os.ReadFile(f)
		if err != nil {
			return nil, err
		}
		v, err := readYAMLAsJSON(data, f)
		if err != nil {
			return nil, err
		}
		mergeValues(user, v)
	}
	for _, s := range opts.Sets {
		if err := applySet(user, s); err != nil {
			return nil, err
		}
	}
	mergeValues(vals, user)
	return vals, nil
}

func loadChart(dir string) (map[string]interface{}, error) {
	data, err := os.ReadFile(filepath.Join(dir, "Chart.yaml"))
	if err != nil {
		return nil, err
	}
	meta, err := readYAMLAsJSON(data, "Chart.yaml")
	if err != nil {
		return nil, err
	}
	if meta["apiVersion"] != "v2" {
		return nil, fmt.Errorf("Chart.yaml: apiVersion %v; only v2 charts are rendered", meta["apiVersion"])
	}
	for _, k := range []string{"name", "version"} {
		if s, _ := meta[k].(string); s == "" {
			return nil, fmt.Errorf("Chart.yaml: no %s", k)
		}
	}
	if _, ok := meta["dependencies"]; ok {
		return nil, fmt.Errorf("Chart.yaml: dependencies (subcharts) are not rendered by this stand-in")
	}
	// .Chart's fields as helm names them (its Go struct's names).
	chart := map[string]interface{}{}
	for k, v := range meta {
		name := strings.ToUpper(k[:1]) + k[1:]
		if k == "apiVersion" {
			name = "APIVersion"
		}
		chart[name] = v
	}
	return chart, nil
}

// plainNumbers turns integral float64s back into integers, as helm's toYaml writes them (its
// YAML goes through JSON).
func plainNumbers(v interface{}) interface{} {
	switch t := v.(type) {
	case float64:
		if t == float64(int64(t)) {
			return int64(t)
		}
	case map[string]interface{}:
		out := make(map[string]interface{}, len(t))
		for k, e := range t {
			out[k] = plainNumbers(e)
		}
		return out
	case []interface{}:
		out := make([]interface{}, len(t))
		for i, e := range t {
			out[i] = plainNumbers(e)
		}
		return out
	}
	return v
}

func toYAML(v interface{}) string {
	var b bytes.Buffer
	enc := yaml.NewEncoder(&b)
	enc.SetIndent(2)
	if err := enc.Encode(plainNumbers(v)); err != nil {
		return "" // as helm's toYaml: an error renders as nothing
	}
	enc.Close()
	return strings.TrimSuffix(b.String(), "\n")
}

func funcMap(root **template.Template) template.FuncMap {
	f := sprig.TxtFuncMap()
	// helm leaves these out: a chart does not read the environment of whoever renders it.
	delete(f, "env")
	delete(f, "expandenv")
	depth := map[string]int{}
	f["include"] = func(name string, data interface{}) (string, error) {
		if depth[name] > 1000 {
			return "", fmt.Errorf("include %q: too deeply nested", name)
		}
		depth[name]++
		defer func() { depth[name]-- }()
		var b bytes.Buffer
		err := (*root).ExecuteTemplate(&b, name, data)
		return b.String(), err
	}
	f["tpl"] = func(text string, data interface{}) (string, error) {
		t, err := (*root).Clone()
		if err != nil {
			return "", err
		}
		t, err = t.New("tpl").Parse(text)
		if err != nil {
			return "", fmt.Errorf("tpl: %v", err)
		}
		var b bytes.Buffer
		if err := t.Execute(&b, data); err != nil {
			return "", err
		}
		return strings.ReplaceAll(b.String(), "<no value>", ""), nil
	}
	f["required"] = func(msg string, v interface{}) (interface{}, error) {
		if v == nil {
			return nil, fmt.Errorf("%s", msg)
		}
		if s, ok := v.(string); ok && s == "" {
			return nil, fmt.Errorf("%s", msg)
		}
		return v, nil
	}
	f["toYaml"] = toYAML
	f["fromYaml"] = func(s string) map[string]interface{} {
		m, err := readYAMLAsJSON([]byte(s), "fromYaml")
		if err != nil {
			return map[string]interface{}{"Error": err.Error()}
		}
		return m
	}
	f["toJson"] = func(v interface{}) string {
		j, err := json.Marshal(v)
		if err != nil {
			return ""
		}
		return string(j)
	}
	f["fromJson"] = func(s string) map[string]interface{} {
		m := map[string]interface{}{}
		if err := json.Unmarshal([]byte(s), &m); err != nil {
			m["Error"] = err.Error()
		}
		return m
	}
	// As in `helm template`, which talks to no cluster: lookup finds nothing.
	f["lookup"] = func(apiVersion, kind, namespace, name string) map[string]interface{} {
		return map[string]interface{}{}
	}
	return f
}

type document struct {
	source string
	kind   string
	text   string
}

func kindRank(kind string) int {
	for i, k := range installOrder {
		if k == kind {
			return i
		}
	}
	return len(installOrder)
}

// renderChart returns the manifests, or with notes the rendered NOTES.txt.
func renderChart(opts renderOptions, notes bool) (string, error) {
	chart, err := loadChart(opts.ChartDir)
	if err != nil {
		return "", err
	}
	vals, err := loadValues(opts)
	if err != nil {
		return "", err
	}
	chartName := chart["Name"].(string)
	if fi, err := os.Stat(filepath.Join(opts.ChartDir, "charts")); err == nil && fi.IsDir() {
		return "", fmt.Errorf("%s/charts: subcharts are not rendered by this stand-in", chartName)
	}
	var root *template.Template
	root = template.New("chart").Funcs(funcMap(&root)).Option("missingkey=zero")
	tdir := filepath.Join(opts.ChartDir, "templates")
	var names []string
	err = filepath.WalkDir(tdir, func(path string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		rel, _ := filepath.Rel(opts.ChartDir, path)
		name := chartName + "/" + filepath.ToSlash(rel)
		data, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		if _, err := root.New(name).Parse(string(data)); err != nil {
			return fmt.Errorf("parse error in %s", strings.TrimPrefix(err.Error(), "template: "))
		}
		names = append(names, name)
		return nil
	})
	if err != nil {
		return "", err
	}
	sort.Strings(names)
	release := map[string]interface{}{"Name": opts.ReleaseName, "Namespace": opts.Namespace,
		"Service": "Helm", "IsInstall": true, "IsUpgrade": false, "Revision": 1}
	execute := func(name string) (string, error) {
		data := map[string]interface{}{"Values": vals, "Release": release, "Chart": chart,
			"Template": map[string]interface{}{"Name": name, "BasePath": chartName + "/templates"}}
		var b bytes.Buffer
		if err := root.ExecuteTemplate(&b, name, data); err != nil {
			return "", fmt.Errorf("execution error in %s", strings.TrimPrefix(err.Error(), "template: "))
		}
		return strings.ReplaceAll(b.String(), "<no value>", ""), nil
	}
	if notes {
		return execute(chartName + "/templates/NOTES.txt")
	}
	var docs []document
	for _, name := range names {
		base := filepath.Base(name)
		if strings.HasPrefix(base, "_") || base == "NOTES.txt" {
			continue
		}
		out, err := execute(name)
		if err != nil {
			return "", err
		}
		for _, text := range splitDocuments(out) {
			var head struct {
				Kind string `yaml:"kind"`
			}
			if err := yaml.Unmarshal([]byte(text), &head); err != nil {
				return "", fmt.Errorf("YAML parse error in %s: %v", name, err)
			}
			if head.Kind == "" {
				return "", fmt.Errorf("%s: an object without a kind", name)
			}
			docs = append(docs, document{source: name, kind: head.Kind, text: text})
		}
	}
	sort.SliceStable(docs, func(i, j int) bool {
		ri, rj := kindRank(docs[i].kind), kindRank(docs[j].kind)
		if ri != rj {
			return ri < rj
		}
		return ri == len(installOrder) && docs[i].kind < docs[j].kind
	})
	var b strings.Builder
	for _, d := range docs {
		fmt.Fprintf(&b, "---\n# Source: %s\n%s\n", d.source, d.text)
	}
	return b.String(), nil
}

// splitDocuments cuts a template's output at its "---" lines, leaving out documents that hold
// nothing but blanks and comments.
func splitDocuments(out string) []string {
	var docs []string
	var cur []string
	flush := func() {
		text := strings.TrimSpace(strings.Join(cur, "\n"))
		cur = nil
		for _, line := range strings.Split(text, "\n") {
			if t := strings.TrimSpace(line); t != "" && !strings.HasPrefix(t, "#") {
				docs = append(docs, text)
				return
			}
		}
	}
	for _, line := range strings.Split(out, "\n") {
		if strings.HasPrefix(line, "---") && strings.TrimSpace(strings.TrimLeft(line, "-")) == "" {
			flush()
			continue
		}
		cur = append(cur, line)
	}
	flush()
	return docs
}
