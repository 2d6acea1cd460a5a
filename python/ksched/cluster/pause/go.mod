module ksched.local/pause

go 1.24
