package sim

import (
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
)

const traceHeader = "job_id,submit_s,duration_s,gpus,gpu_type,user,gpu_util_pct\n"

func TestReadTrace(t *testing.T) {
	tests := map[string]struct {
		csv     string
		skipBad bool
		want    []TraceJob
		wantBad []RowError
		wantErr string
	}{
		"philly rows, sorted by submission": {
			csv: traceHeader + "b,601,66,1,,11cb48,\na,0,66.5,8,,ee9e8c,42\n",
			want: []TraceJob{
				{ID: "a", Line: 3, Submit: 0, Duration: 66500 * time.Millisecond, GPUs: 8, User: "ee9e8c", UtilPercent: 42},
				{ID: "b", Line: 2, Submit: 601 * time.Second, Duration: 66 * time.Second, GPUs: 1, User: "11cb48", UtilPercent: -1},
			},
		},
		"columns in another order, optional ones absent": {
			csv:  "user,gpus,duration_s,submit_s,job_id\nvc1,2,10,5,x\n",
			want: []TraceJob{{ID: "x", Line: 2, Submit: 5 * time.Second, Duration: 10 * time.Second, GPUs: 2, User: "vc1", UtilPercent: -1}},
		},
		"a malformed row stops the read, naming its line": {
			csv:     traceHeader + "a,0,66,1,,u,\nb,10,66,zero,,u,\n",
			wantErr: "trace.csv:3: gpus \"zero\" is not a positive whole number (fix the row, or pass --skip-bad-rows to leave such rows out)",
		},
		"malformed rows skipped and reported": {
			csv: traceHeader +
				"a,0,66,1,,u,\n" +
				"b,-1,66,1,,u,\n" + // line 3
				"c,1,0,1,,u,\n" + // line 4
				"d,1,5,1,,,\n" + // line 5
				"e,1,5,1,,u,140\n" + // line 6
				"f,1,5\n" + // line 7
				"g,1,5,2,,u,\n" +
				"h,1,9300000000,1,,u,\n", // line 9: would wrap to a negative duration
			skipBad: true,
			want: []TraceJob{
				{ID: "a", Line: 2, Duration: 66 * time.Second, GPUs: 1, User: "u", UtilPercent: -1},
				{ID: "g", Line: 8, Submit: time.Second, Duration: 5 * time.Second, GPUs: 2, User: "u", UtilPercent: -1},
			},
			wantBad: []RowError{
				{File: "trace.csv", Line: 3, Msg: `submit_s "-1" is not a number of seconds, 0 or more`},
				{File: "trace.csv", Line: 4, Msg: `duration_s "0" is not a number of seconds above 0`},
				{File: "trace.csv", Line: 5, Msg: "user is empty"},
				{File: "trace.csv", Line: 6, Msg: `gpu_util_pct "140" is not a percentage from 0 to 100`},
				{File: "trace.csv", Line: 7, Msg: "3 fields, the header has 7"},
				{File: "trace.csv", Line: 9, Msg: `duration_s "9300000000" is more than 9223372036 seconds (292 years)`},
			},
		},
		"a CSV syntax error names its line, and the rows after it are read": {
			csv:     traceHeader + "a,0,66,1,,u,\nb,1,66,1,,u\"x,\nc,2,66,1,,u,\n",
			skipBad: true,
			want: []TraceJob{
				{ID: "a", Line: 2, Duration: 66 * time.Second, GPUs: 1, User: "u", UtilPercent: -1},
				{ID: "c", Line: 4, Submit: 2 * time.Second, Duration: 66 * time.Second, GPUs: 1, User: "u", UtilPercent: -1},
			},
			wantBad: []RowError{{File: "trace.csv", Line: 3, Msg: `bare " in non-quoted-field`}},
		},
		"header without a required column": {
			csv:     "job_id,submit_s,gpus,user\n",
			wantErr: `trace.csv: the header has no "duration_s" column; want job_id,submit_s,duration_s,gpus,user (gpu_type and gpu_util_pct optional)`,
		},
		"no rows": {
			csv:     traceHeader,
			wantErr: "trace.csv: no job rows",
		},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			got, bad, err := ReadTrace(strings.NewReader(tc.csv), "trace.csv", tc.skipBad)
			if !checkError(t, err, tc.wantErr) {
				return
			}
			if diff := cmp.Diff(tc.want, got); diff != "" {
				t.Errorf("jobs (-want +got):\n%s", diff)
			}
			var gotBad []RowError
			for _, b := range bad {
				gotBad = append(gotBad, *b)
			}
			if diff := cmp.Diff(tc.wantBad, gotBad); diff != "" {
				t.Errorf("malformed rows (-want +got):\n%s", diff)
			}
		})
	}
}

// TestReadTracePhilly reads the real sample when it is there: every row parses.
func TestReadTracePhilly(t *testing.T) {
	jobs, bad, err := ReadTraceFile("../../shared/data/philly_week.csv", false)
	if err != nil {
		t.Skipf("the Philly sample is not here: %v", err)
	}
	if len(bad) != 0 || len(jobs) != 12751 {
		t.Errorf("got %d jobs and %d malformed rows, want 12751 and 0", len(jobs), len(bad))
	}
}

// checkError fails the test unless err is the wanted error (none when want is empty),
// and reports whether the test should go on to check the result.
func checkError(t *testing.T, err error, want string) bool {
	t.Helper()
	switch {
	case want == "" && err != nil:
		t.Fatal(err)
	case want != "" && (err == nil || err.Error() != want):
		t.Fatalf("error %v, want %q", err, want)
	}
	return want == ""
}

// FuzzReadTrace: whatever the file holds, the reader returns an error or jobs the
// replay can use (a positive duration and GPU count, a submission time not negative,
// in order), never a panic; with skipBad, every row it leaves out is reported.
func FuzzReadTrace(f *testing.F) {
	f.Add(traceHeader + "b,601,66,1,,11cb48,\na,0,66.5,8,,ee9e8c,42\n")
	f.Add(traceHeader + "a,1e10,1e300,1,,u,101\n")
	f.Add("user,gpus,duration_s,submit_s,job_id\nvc1,2,10,5,x\n")
	f.Add(traceHeader + "a,0,NaN,1,,u,\nb,-0,Inf,99999999999,,u,-5\n")
	f.Add(traceHeader + "a,0,1e-10,1,,u,\n") // positive, but under a nanosecond
	f.Fuzz(func(t *testing.T, csv string) {
		for _, skipBad := range []bool{false, true} {
			jobs, bad, err := ReadTrace(strings.NewReader(csv), "trace.csv", skipBad)
			if err != nil {
				continue
			}
			for i, j := range jobs {
				if j.Duration <= 0 || j.GPUs <= 0 || j.Submit < 0 || j.UtilPercent < -1 || j.UtilPercent > 100 {
					t.Fatalf("skipBad %v: row %d read as %+v", skipBad, j.Line, j)
				}
				if i > 0 && j.Submit < jobs[i-1].Submit {
					t.Fatalf("skipBad %v: jobs out of submission order at line %d", skipBad, j.Line)
				}
			}
			if !skipBad && len(bad) > 0 {
				t.Fatalf("%d bad rows reported without skipBad and no error", len(bad))
			}
		}
	})
}
