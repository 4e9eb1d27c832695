// specd::Error and ErrorCode for the layers above the actors: net/ includes
// only actors/, config/ and net/ headers, and the codes are the engine's
// (its session protocol reports them, engine/error_code.h).
#pragma once

#include "engine/error_code.h"
