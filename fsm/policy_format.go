package fsm

import (
	"fmt"
	"strings"

	"github.com/quorate/quorate/admission"
)

// plainPolicyVersion is PolicyVersion without its Format method.
type plainPolicyVersion PolicyVersion

// Format prints pv as fmt prints a struct, except that a policy without
// local decisions prints without its (zero) Local field under %v and %+v,
// exactly as policies printed before local decisions existed: texts and
// digests of results made by earlier binaries stay comparable.
func (pv PolicyVersion) Format(s fmt.State, verb rune) {
	text := fmt.Sprintf(fmt.FormatString(s, verb), plainPolicyVersion(pv))
	if verb == 'v' && !s.Flag('#') && pv.Policy.Local == (admission.Local{}) {
		zero := " " + fmt.Sprintf("%v", admission.Local{})
		if s.Flag('+') {
			zero = " Local:" + fmt.Sprintf("%+v", admission.Local{})
		}
		text = strings.Replace(text, zero+"}", "}", 1)
	}
	_, _ = s.Write([]byte(text))
}
