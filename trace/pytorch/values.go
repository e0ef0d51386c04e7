package pytorch

import (
	"encoding/json"
	"slices"
	"sort"
	"strconv"
	"strings"

	"github.com/fragsim/fragsim/trace/pickle"
)

func getString(d *pickle.Dict, key string) (string, bool) {
	v, ok := d.Get(key)
	if !ok {
		return "", false
	}
	s, ok := v.(string)
	return s, ok
}

func toInt(v any) (int64, bool) {
	switch x := v.(type) {
	case int64:
		return x, true
	case uint64:
		return int64(x), true
	case bool:
		if x {
			return 1, true
		}
		return 0, true
	case float64:
		return int64(x), true
	}
	return 0, false
}

func getInt(d *pickle.Dict, key string) (int64, bool) {
	v, ok := d.Get(key)
	if !ok {
		return 0, false
	}
	return toInt(v)
}

func asItems(v any) []any {
	switch x := v.(type) {
	case *pickle.List:
		return x.Items
	case pickle.Tuple:
		return x
	}
	return nil
}

// pyString renders a settings value as Python's str() would.
func pyString(v any, depth int) string {
	switch x := v.(type) {
	case nil:
		return "None"
	case bool:
		if x {
			return "True"
		}
		return "False"
	case int64:
		return strconv.FormatInt(x, 10)
	case uint64:
		return strconv.FormatUint(x, 10)
	case float64:
		s := strconv.FormatFloat(x, 'g', -1, 64)
		if !strings.ContainsAny(s, ".eEn") {
			s += ".0"
		}
		return s
	case string:
		return x
	}
	if depth > 8 {
		return "..."
	}
	switch x := v.(type) {
	case *pickle.Dict:
		parts := make([]string, 0, x.Len())
		for _, p := range sortedPairs(x) {
			parts = append(parts, strconv.Quote(p.Key)+":"+pyJSON(p.Value, depth+1))
		}
		return "{" + strings.Join(parts, ",") + "}"
	}
	items := asItems(v)
	parts := make([]string, len(items))
	for i, it := range items {
		parts[i] = pyString(it, depth+1)
	}
	return "[" + strings.Join(parts, ",") + "]"
}

func pyJSON(v any, depth int) string {
	switch v := v.(type) {
	case string:
		b, _ := json.Marshal(v)
		return string(b)
	case nil:
		return "null"
	case bool:
		if v {
			return "true"
		}
		return "false"
	}
	return pyString(v, depth)
}

// sortedPairs orders a dict's pairs numerically when every key is a number,
// else by key.
func sortedPairs(d *pickle.Dict) []pickle.Pair {
	ps := slices.Clone(d.Pairs)
	numeric := true
	for _, p := range ps {
		if _, err := strconv.ParseFloat(p.Key, 64); err != nil {
			numeric = false
			break
		}
	}
	sort.SliceStable(ps, func(i, j int) bool {
		if numeric {
			a, _ := strconv.ParseFloat(ps[i].Key, 64)
			b, _ := strconv.ParseFloat(ps[j].Key, 64)
			return a < b
		}
		return ps[i].Key < ps[j].Key
	})
	return ps
}
