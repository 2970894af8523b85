package main

// Two sets of manifests compared as data: objects matched by kind, namespace and name, then
// field by field as parsed YAML (so "60" and 60 differ, and layout, quoting and key order do
// not). Each difference names the object and the field's path.

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"os"
	"reflect"
	"sort"
	"strings"

	"gopkg.in/yaml.v3"
)

type objects struct {
	keys []string
	byID map[string]map[string]interface{}
}

func objectID(o map[string]interface{}) string {
	meta, _ := o["metadata"].(map[string]interface{})
	name, _ := meta["name"].(string)
	ns, _ := meta["namespace"].(string)
	kind, _ := o["kind"].(string)
	if ns != "" {
		return fmt.Sprintf("%s %s/%s", kind, ns, name)
	}
	return fmt.Sprintf("%s %s", kind, name)
}

func readObjects(path string, ignoreKinds map[string]bool) (objects, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return objects{}, err
	}
	res := objects{byID: map[string]map[string]interface{}{}}
	dec := yaml.NewDecoder(bytes.NewReader(data))
	for {
		var doc interface{}
		if err := dec.Decode(&doc); errors.Is(err, io.EOF) {
			break
		} else if err != nil {
			return objects{}, fmt.Errorf("%s: %v", path, err)
		}
		if doc == nil {
			continue
		}
		o, ok := doc.(map[string]interface{})
		if !ok {
			return objects{}, fmt.Errorf("%s: a document that is not an object", path)
		}
		if kind, _ := o["kind"].(string); ignoreKinds[kind] {
			continue
		}
		if kind, _ := o["kind"].(string); kind == "Secret" {
			unwrapSecretData(o)
		}
		id := objectID(o)
		if _, dup := res.byID[id]; dup {
			return objects{}, fmt.Errorf("%s: %s twice", path, id)
		}
		res.byID[id] = o
		res.keys = append(res.keys, id)
	}
	return res, nil
}

// unwrapSecretData joins a Secret's base64 values written over several lines (as kustomize's
// secretGenerator writes them): the API server reads them the same as on one line.
func unwrapSecretData(o map[string]interface{}) {
	data, _ := o["data"].(map[string]interface{})
	for k, v := range data {
		if s, ok := v.(string); ok {
			data[k] = strings.NewReplacer("\n", "", "\r", "").Replace(s)
		}
	}
}

func describe(v interface{}) string {
	if v == nil {
		return "null"
	}
	switch t := v.(type) {
	case string:
		return fmt.Sprintf("%q (string)", t)
	case map[string]interface{}:
		return fmt.Sprintf("a mapping of %d keys", len(t))
	case []interface{}:
		return fmt.Sprintf("a list of %d items", len(t))
	}
	return fmt.Sprintf("%v (%T)", v, v)
}

// elementName labels a list item by its name, where it has one (containers, env, volumes).
func elementName(v interface{}) string {
	if m, ok := v.(map[string]interface{}); ok {
		if n, ok := m["name"].(string); ok {
			return "(" + n + ")"
		}
	}
	return ""
}

func diffValues(path string, want, got interface{}, out *[]string) {
	wm, wok := want.(map[string]interface{})
	gm, gok := got.(map[string]interface{})
	if wok && gok {
		keys := map[string]bool{}
		for k := range wm {
			keys[k] = true
		}
		for k := range gm {
			keys[k] = true
		}
		sorted := make([]string, 0, len(keys))
		for k := range keys {
			sorted = append(sorted, k)
		}
		sort.Strings(sorted)
		for _, k := range sorted {
			p := k
			if path != "" {
				p = path + "." + k
			}
			wv, win := wm[k]
			gv, gin := gm[k]
			switch {
			case !gin:
				*out = append(*out, fmt.Sprintf("%s: missing (want %s)", p, describe(wv)))
			case !win:
				*out = append(*out, fmt.Sprintf("%s: not wanted (got %s)", p, describe(gv)))
			default:
				diffValues(p, wv, gv, out)
			}
		}
		return
	}
	wl, wok := want.([]interface{})
	gl, gok := got.([]interface{})
	if wok && gok {
		for i := 0; i < len(wl) || i < len(gl); i++ {
			switch {
			case i >= len(gl):
				*out = append(*out, fmt.Sprintf("%s[%d]: missing (want %s)", path, i, describe(wl[i])))
			case i >= len(wl):
				*out = append(*out, fmt.Sprintf("%s[%d]: not wanted (got %s)", path, i, describe(gl[i])))
			default:
				diffValues(fmt.Sprintf("%s[%d]%s", path, i, elementName(wl[i])), wl[i], gl[i], out)
			}
		}
		return
	}
	if !reflect.DeepEqual(want, got) {
		*out = append(*out, fmt.Sprintf("%s: want %s, got %s", path, describe(want), describe(got)))
	}
}

// compareObjects lists what differs, in WANT's order of objects.
func compareObjects(want, got objects) []string {
	var diffs []string
	for _, id := range want.keys {
		g, ok := got.byID[id]
		if !ok {
			diffs = append(diffs, id+": missing")
			continue
		}
		var fields []string
		diffValues("", want.byID[id], g, &fields)
		for _, f := range fields {
			diffs = append(diffs, id+": "+f)
		}
	}
	for _, id := range got.keys {
		if _, ok := want.byID[id]; !ok {
			diffs = append(diffs, id+": not wanted")
		}
	}
	return diffs
}
