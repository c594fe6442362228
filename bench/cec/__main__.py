from bench.cec.report import main

main()
