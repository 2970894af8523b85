# Writes the text file IN into OUT as a C++ string constant (paladin::server::kDashboardHtml).
file(READ ${IN} TEXT)
string(FIND "${TEXT}" ")PALADIN_EMBED\"" CLASH)
if(NOT CLASH EQUAL -1)
  message(FATAL_ERROR "${IN} contains the raw-string delimiter )PALADIN_EMBED\"")
endif()
file(WRITE ${OUT} "// Generated from ${IN} by cmake/embed_text.cmake; do not edit.\n"
                  "namespace paladin::server {\n"
                  "extern const char kDashboardHtml[];\n"
                  "const char kDashboardHtml[] = R\"PALADIN_EMBED(${TEXT})PALADIN_EMBED\";\n"
                  "}  // namespace paladin::server\n")
