package main

// What chart_render claims to do as helm does, each case from helm's documented behaviour; run
// as the ctest k8s_chart_render_test.

import (
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
)

func TestSetValuesAreTypedAsHelmTypesThem(t *testing.T) {
	cases := []struct {
		in   string
		want interface{}
	}{
		{"true", true}, {"false", false}, {"null", nil}, {"10", int64(10)}, {"-3", int64(-3)},
		{"0", int64(0)},
		{"010", "010"},   // a leading zero keeps it a string
		{"1.5", "1.5"},   // floats stay strings
		{"0.5", "0.5"},   // so the scheduler's interval survives --set
		{"a\\,b", "a,b"}, // an escaped comma
	}
	for _, c := range cases {
		if got := typedValue(c.in, false); !reflect.DeepEqual(got, c.want) {
			t.Errorf("typedValue(%q) = %#v, want %#v", c.in, got, c.want)
		}
	}
	if got := typedValue("10", true); got != "10" {
		t.Errorf("--set-string 10 = %#v, want the string", got)
	}
}

func TestSetPathsListsAndEscapes(t *testing.T) {
	vals := map[string]interface{}{}
	for _, e := range []string{`a.b=1,c={x,2}`, `l[1]=v`, `d.e\.f=g`, `m=a\,b`} {
		if err := applySet(vals, setArg{Kind: "--set", Expr: e}); err != nil {
			t.Fatalf("%s: %v", e, err)
		}
	}
	want := map[string]interface{}{
		"a": map[string]interface{}{"b": int64(1)},
		"c": []interface{}{"x", int64(2)},
		"l": []interface{}{nil, "v"},
		"d": map[string]interface{}{"e.f": "g"},
		"m": "a,b",
	}
	if !reflect.DeepEqual(vals, want) {
		t.Errorf("got %#v\nwant %#v", vals, want)
	}
	if err := applySet(vals, setArg{Kind: "--set", Expr: "novalue"}); err == nil {
		t.Error("a --set without = accepted")
	}
}

func TestValuesMergeMapsReplaceListsAndNullRemoves(t *testing.T) {
	dst := map[string]interface{}{
		"keep": "x",
		"m":    map[string]interface{}{"a": 1.0, "b": 2.0},
		"l":    []interface{}{"1", "2"},
		"gone": "y",
	}
	mergeValues(dst, map[string]interface{}{
		"m": map[string]interface{}{"b": 3.0}, "l": []interface{}{"3"}, "gone": nil})
	want := map[string]interface{}{
		"keep": "x", "m": map[string]interface{}{"a": 1.0, "b": 3.0}, "l": []interface{}{"3"}}
	if !reflect.DeepEqual(dst, want) {
		t.Errorf("got %#v\nwant %#v", dst, want)
	}
}

// writeChart makes a chart of the given files (relative names) in a fresh folder.
func writeChart(t *testing.T, files map[string]string) string {
	dir := t.TempDir()
	files["Chart.yaml"] = "apiVersion: v2\nname: c\nversion: 0.1.0\nappVersion: \"1.0\"\n"
	for name, text := range files {
		p := filepath.Join(dir, name)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(text), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	return dir
}

func TestRenderAsHelmTemplate(t *testing.T) {
	dir := writeChart(t, map[string]string{
		"values.yaml": "big: 1000000\nport: 8443\nname: web\nlabels: {b: \"2\", a: one}\n",
		"templates/_helpers.tpl": `{{- define "c.name" -}}{{ .Release.Name }}-{{ .Values.name }}{{- end }}` +
			"\nkind: NotRendered\n",
		"templates/z.yaml": "kind: Deployment\nmetadata:\n  name: {{ include \"c.name\" . }}\n" +
			"  labels:\n    {{- toYaml .Values.labels | nindent 4 }}\n" +
			"big: {{ .Values.big }}\nport: {{ .Values.port }}\nmissing: \"{{ .Values.nothing }}\"\n" +
			"chart: {{ .Chart.Name }}-{{ .Chart.AppVersion }}\nns: {{ .Release.Namespace }}\n" +
			"tpl: {{ tpl \"{{ .Values.name }}!\" . }}\n---\n# only a comment\n---\n",
		"templates/a.yaml":    "kind: Widget\n---\nkind: Namespace\n",
		"templates/NOTES.txt": "installed {{ .Release.Name }}\n",
	})
	out, err := renderChart(renderOptions{ReleaseName: "r", Namespace: "ns", ChartDir: dir}, false)
	if err != nil {
		t.Fatal(err)
	}
	// helm's install order: Namespace first, Deployment before kinds it does not know.
	var kinds []string
	for _, line := range strings.Split(out, "\n") {
		if strings.HasPrefix(line, "kind: ") {
			kinds = append(kinds, strings.TrimPrefix(line, "kind: "))
		}
	}
	if want := []string{"Namespace", "Deployment", "Widget"}; !reflect.DeepEqual(kinds, want) {
		t.Errorf("kinds %v, want %v (partials and empty documents left out)\n%s", kinds, want, out)
	}
	for _, want := range []string{
		"name: r-web",
		"    a: one\n    b: \"2\"", // toYaml: keys sorted, a string that reads as a number quoted
		"big: 1e+06",               // values go through JSON: a float, printed as helm prints it
		"port: 8443",
		`missing: ""`, // <no value> becomes nothing
		"chart: c-1.0",
		"ns: ns",
		"tpl: web!",
		"# Source: c/templates/z.yaml",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("no %q in\n%s", want, out)
		}
	}
	notes, err := renderChart(renderOptions{ReleaseName: "r", ChartDir: dir}, true)
	if err != nil || notes != "installed r\n" {
		t.Errorf("NOTES: %q, %v", notes, err)
	}
}

func TestRenderRefusesWhatHelmRefusesAndWhatItLacks(t *testing.T) {
	for name, tmpl := range map[string]string{
		"required":      `kind: X\nv: {{ required "v: give it" .Values.v }}`,
		"env":           `kind: X\nv: {{ env "HOME" }}`, // helm leaves env out
		"capabilities":  `kind: X\nv: {{ .Capabilities.KubeVersion.Version }}`,
		"files":         `kind: X\nv: {{ .Files.Get "f" }}`,
		"no kind":       `v: 1`,
		"not yaml":      "kind: X\n  v: [",
		"unknown func":  `kind: X\nv: {{ toToml . }}`,
		"include depth": `{{ define "loop" }}{{ include "loop" . }}{{ end }}kind: X\nv: {{ include "loop" . }}`,
	} {
		dir := writeChart(t, map[string]string{"templates/t.yaml": strings.ReplaceAll(tmpl, `\n`, "\n")})
		_, err := renderChart(renderOptions{ReleaseName: "r", ChartDir: dir}, false)
		switch {
		case err == nil:
			t.Errorf("%s: rendered", name)
		case name == "required" && !strings.Contains(err.Error(), "v: give it"):
			t.Errorf("required: the message not given: %v", err)
		default:
			t.Logf("%s: %v", name, err)
		}
	}
}

func TestCompareNamesObjectAndField(t *testing.T) {
	dir := t.TempDir()
	want := filepath.Join(dir, "want.yaml")
	got := filepath.Join(dir, "got.yaml")
	os.WriteFile(want, []byte("kind: A\nmetadata: {name: a, namespace: n}\nspec: {l: [{name: c, x: \"60\"}]}\n"+
		"---\nkind: B\nmetadata: {name: b}\n---\nkind: Secret\nmetadata: {name: s}\ndata: {k: \"YW\\nJj\"}\n"), 0o644)
	os.WriteFile(got, []byte("kind: A\nmetadata: {name: a, namespace: n}\nspec: {l: [{name: c, x: 60}]}\n"+
		"---\nkind: C\nmetadata: {name: c}\n---\nkind: Secret\nmetadata: {name: s}\ndata: {k: YWJj}\n"), 0o644)
	w, err := readObjects(want, nil)
	if err != nil {
		t.Fatal(err)
	}
	g, err := readObjects(got, nil)
	if err != nil {
		t.Fatal(err)
	}
	diffs := compareObjects(w, g)
	wantDiffs := []string{
		`A n/a: spec.l[0](c).x: want "60" (string), got 60 (int)`,
		"B b: missing",
		"C c: not wanted",
	}
	if !reflect.DeepEqual(diffs, wantDiffs) {
		t.Errorf("got\n%s\nwant\n%s", strings.Join(diffs, "\n"), strings.Join(wantDiffs, "\n"))
	}
	w, _ = readObjects(want, map[string]bool{"A": true, "B": true})
	g, _ = readObjects(got, map[string]bool{"A": true, "C": true})
	if d := compareObjects(w, g); len(d) != 0 {
		t.Errorf("ignored kinds still compared: %v", d)
	}
}
