// Package clitest holds what the tests of the quorate and quorate-bench
// commands share: running a command line through a command's run function
// (the one main calls) and checking that an error names the flag or field
// at fault, which both commands promise. Only tests import it.
package clitest
