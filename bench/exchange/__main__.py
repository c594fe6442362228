from bench.exchange.report import main

main()
