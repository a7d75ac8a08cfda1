// The transport the conformance suite runs against (--transport NAME).
#pragma once

#include <string>

namespace wstest {
const std::string& conformance_transport();
}
