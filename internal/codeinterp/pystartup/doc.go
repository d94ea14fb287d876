// Package pystartup holds the IPython startup script of the code
// interpreter's Python kernel: the Python half of the code interpreter's rich
// results (the result fields data and chart of the /execute stream, spec §4).
//
// The script registers two display formatters, so that a display_data or
// execute_result carries them next to the usual MIME types:
//
//   - e2b/data: a pandas DataFrame as {column: [values...]} (to_dict
//     orient="list"), timestamps as ISO 8601 strings, NaN/NaT as null;
//   - e2b/chart: a matplotlib Figure as the chart description typed by
//     @e2b/code-interpreter 2.8.0 (dist/index.d.ts: ChartType, Chart,
//     Chart2D, PointChart, BarChart, PieChart, BoxAndWhiskerChart,
//     SuperChart), in the same display_data as the inline backend's
//     image/png.
//
// It also turns traceback colours off (InteractiveShell.colors = NoColor)
// and makes PIL's Image.show() and Image.save(path) display the image.
// pandas, matplotlib and PIL are optional: none is imported at start, and a
// kernel without them starts as usual.
//
// The kernel loads the script through ipykernel's exec_files option: write
// Script to a file the kernel can read and append [ExecFilesFlag] of that
// path to the kernel's command line:
//
//	/usr/bin/python3 -m ipykernel_launcher -f {connection_file} --IPKernelApp.exec_files=/path/to/startup.py
//
// (ipykernel 6.17 with traitlets 5 takes one list item per flag; the
// ['/path'] list-literal form still works but warns that it is deprecated.)
// The script runs in the user namespace before the first cell and leaves no
// names there.
package pystartup
