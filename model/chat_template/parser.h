// Parser: builds the AST (ast.h) from the lexer's tokens by recursive descent, following
// jinja2's grammar and operator precedence. Everything it does not support is rejected here,
// at parse time, with a ChatTemplateError naming the construct and its line and column, so a
// template that parses renders without surprises.
#pragma once

#include <string_view>

#include "model/chat_template/ast.h"

namespace pagedserve::model::chat {

Program parse_program(std::string_view source);

}  // namespace pagedserve::model::chat
