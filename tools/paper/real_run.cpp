// TEMPORARY STUB until branch paper-real merges.
#include "tools/paper/figures.h"
namespace pagedserve::paper {
void real_section(Report& report, const Workload&) { report.md << "(real section pending)\n"; }
}  // namespace pagedserve::paper
