// Package computeruse carries out the actions of the vendors' computer-use
// tools on a sandbox's X display: Anthropic's `computer_20250124` tool
// (a tool_use block's input) and OpenAI's computer_call actions, each
// taken verbatim and answered in that vendor's result shape — a
// tool_result block, a computer_call_output item — with a PNG screenshot
// after every action that may change the screen.
//
// A vendor's action is parsed into a plan (anthropic.go, openai.go): steps
// of xdotool in the coordinates the model sees, the display size the tool
// declared. The Executor measures the real display, scales the
// coordinates to it (scale.go), runs each step as its own xdotool
// command, and takes the screenshot with ffmpeg's x11grab, scaled back to
// the declared size. Everything runs in the sandbox through a RunFunc, as
// the template's user with DISPLAY set; nothing here knows sandboxes.
//
// Bad input is an *InputError naming the field, which the API answers
// with 400.
package computeruse
