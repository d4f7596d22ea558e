package testenv

import "strings"

// ToSnake turns a camelCase name into snake_case ("functionCall" ->
// "function_call"): how the tests predict the storage form's keys.
func ToSnake(s string) string {
	var b strings.Builder
	for i, c := range s {
		if c >= 'A' && c <= 'Z' {
			if i > 0 {
				b.WriteByte('_')
			}
			c += 'a' - 'A'
		}
		b.WriteRune(c)
	}
	return b.String()
}
